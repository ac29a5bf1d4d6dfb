import Foundation
import Testing
import Tracker

/// App exemptions: patterns that judge beacons (a browser's user agent) and not the events an
/// app posts to /v1/events (its HTTP client's). Labelled incrementally and by a rebuild alike,
/// against the plain computation.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct AppExemptionTests {
    static let ruleSet = #"""
        {"name": "app exemptions",
         "userAgents": [{"pattern": "^curl"}, {"pattern": "okhttp"}, {"pattern": "python-requests"}, {"pattern": "Googlebot\\/", "name": "google"}],
         "appExemptions": [{"pattern": "^curl", "reason": "curl's default"}, {"pattern": "okhttp", "reason": "OkHttp's default"},
                           {"pattern": "python-requests", "reason": "Requests' default"}],
         "ipRanges": ["34.64.0.0/10"], "maxClicksPerAd": 1}
        """#
    static let exempted: Set<String> = ["^curl", "okhttp", "python-requests"]
    static let patterns = ["^curl", "okhttp", "python-requests", "Googlebot\\/"]

    static let okhttp = "okhttp/4.12.0", curl = "curl/8.5.0", requests = "python-requests/2.32.3"
    static let googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    static let person = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15"
    static let home = IPAddress("192.0.2.10"), cloud = IPAddress("34.64.0.9")

    /// Random ads, each sent by one client: an app HTTP client's default, a crawler or a person.
    static func traffic(ads: Int, seed: UInt64) -> [TrackingEvent] {
        var g = SeededGenerator(seed: seed)
        let events = RandomTraffic.events(ads: ads, using: &g)
        var clientOf: [String: EventClient] = [:]
        for ad in Set(events.map(\.requestId)).sorted() {
            let agent = [okhttp, curl, requests, googlebot, person, person].randomElement(using: &g)!
            clientOf[ad] = EventClient(userAgent: agent, ip: Int.random(in: 0..<8, using: &g) == 0 ? cloud : home)
        }
        return events.map { $0.sent(by: clientOf[$0.requestId]!) }
    }

    @Test func exemptedPatternsLabelBeaconsNotAppEventsIncrementallyAndAfterARebuild() async throws {
        try await withTestDatabase { db in
            let ruleSet = try IVTRuleSet.parse(Array(Self.ruleSet.utf8)) { name in throw CocoaError(.fileNoSuchFile, userInfo: ["name": name]) }
            #expect(try await IVTRuleSets(pool: db.pool).activate(ruleSet) == 1)
            let app = Self.traffic(ads: 120, seed: 31), beacons = Self.traffic(ads: 120, seed: 32)
            let projector = db.projector(batchSize: 40)
            var g = SeededGenerator(seed: 33)
            for (a, b) in zip(RandomTraffic.deliveries(of: app, chunks: 4, using: &g), RandomTraffic.deliveries(of: beacons, chunks: 4, using: &g)) {
                try await db.append(a)
                try await db.append(b, keyName: "beacon:tests")
                try await projector.step()
            }
            try await projector.catchUp()
            let rules = ReferenceReports.Rules(patterns: Self.patterns, appExemptions: Self.exempted, beacons: Set(beacons.map(\.id)),
                                               ranges: ["34.64.0.0/10"], maxClicksPerAd: 1)
            let expected = ReferenceReports.csv(app + beacons, rules: rules)
            var got = try await db.reportsAsCSV()
            for (name, csv) in expected {
                #expect(got[name] == csv, "incremental: \(name)")
            }
            // The exemptions make a difference both ways in this traffic.
            let withoutExemptions = ReferenceReports.Rules(patterns: Self.patterns, ranges: ["34.64.0.0/10"], maxClicksPerAd: 1)
            #expect(ReferenceReports.csv(app + beacons, rules: withoutExemptions) != expected)
            let appOnly = ReferenceReports.Rules(patterns: Self.patterns, appExemptions: Self.exempted, ranges: ["34.64.0.0/10"], maxClicksPerAd: 1)
            #expect(ReferenceReports.csv(app + beacons, rules: appOnly) != expected)

            try await expectRebuildReproducesTheProjections(db)
            got = try await db.reportsAsCSV()
            for (name, csv) in expected {
                #expect(got[name] == csv, "after rebuild: \(name)")
            }
        }
    }
}

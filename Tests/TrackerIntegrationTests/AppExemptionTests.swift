import Foundation
import Testing
import Tracker

/// App exemptions: patterns that judge beacons (a browser's user agent) and not the events an
/// app posts to /v1/events (its HTTP client's). Labelled incrementally and by a rebuild alike,
/// against the plain computation, and named by the audit trail.
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
        for ad in Set(events.map(\.logKey)).sorted() {
            let agent = [okhttp, curl, requests, googlebot, person, person].randomElement(using: &g)!
            clientOf[ad] = EventClient(userAgent: agent, ip: Int.random(in: 0..<8, using: &g) == 0 ? cloud : home)
        }
        return events.map { $0.sent(by: clientOf[$0.logKey]!) }
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

    /// One ad per rule: the audit names the pattern (per channel), the range and the limit.
    @Test func theAuditTrailNamesTheRuleBehindEachLabel() async throws {
        try await withTestDatabase { db in
            let ruleSet = try IVTRuleSet.parse(Array(Self.ruleSet.utf8)) { name in throw CocoaError(.fileNoSuchFile, userInfo: ["name": name]) }
            _ = try await IVTRuleSets(pool: db.pool).activate(ruleSet)
            func impression(_ ad: String, _ agent: String, _ ip: IPAddress? = AppExemptionTests.home) -> TrackingEvent {
                Events.make(.impression, ad: ad, at: Events.at(9)).sent(by: EventClient(userAgent: agent, ip: ip))
            }
            func click(_ ad: String, second: Int) -> TrackingEvent {
                Events.make(.click, ad: ad, at: Events.at(9, 0, second)).sent(by: EventClient(userAgent: Self.person, ip: Self.home))
            }
            try await db.append([impression("app-okhttp", Self.okhttp), impression("app-curl", Self.curl), impression("app-google", Self.googlebot),
                                 impression("app-cloud", Self.person, Self.cloud), impression("app-clicks", Self.person),
                                 click("app-clicks", second: 5), click("app-clicks", second: 9)])
            try await db.append([impression("web-okhttp", Self.okhttp), impression("web-curl", Self.curl)], keyName: "beacon:tests")
            try await db.projector().catchUp()

            let audit = AdAudit(pool: db.pool)
            func labels(_ ad: String) async throws -> [String] {
                let trail = try #require(try await audit.explain(requestId: ad, includeTest: false)).explanation
                return trail.events.map { e in e.outcome.label.map { "\($0.rawValue) by \(e.labelledBy?.summary ?? "nothing")" } ?? "valid" }
            }
            #expect(try await labels("app-okhttp") == ["valid"])
            #expect(try await labels("app-curl") == ["valid"])
            #expect(try await labels("app-google") == [#"declared_bot by pattern "Googlebot\\/" (google)"#])
            #expect(try await labels("web-okhttp") == [#"declared_bot by pattern "okhttp""#])
            #expect(try await labels("web-curl") == [#"declared_bot by pattern "^curl""#])
            #expect(try await labels("app-cloud") == ["datacenter by IP range 34.64.0.0/10"])
            #expect(try await labels("app-clicks") == ["valid", "valid", "excessive_clicks by maxClicksPerAd 1"])

            let google = try #require(try await audit.explain(requestId: "app-google", includeTest: false)).explanation
            #expect(google.json.contains(#""label":"declared_bot","labelledBy":{"pattern":"Googlebot\\/","name":"google"},"outcome""#), "\(google.json)")
            #expect(google.events[0].summary == #"invalid traffic (declared_bot, pattern "Googlebot\\/" (google)), left out of every measure"#)
            let valid = try #require(try await audit.explain(requestId: "app-okhttp", includeTest: false)).explanation
            #expect(valid.json.contains(#""label":null,"labelledBy":null,"outcome""#), "\(valid.json)")
            let clicks = try #require(try await audit.explain(requestId: "app-clicks", includeTest: false)).explanation
            #expect(clicks.json.contains(#""labelledBy":{"maxClicksPerAd":1}"#))
            let cloud = try #require(try await audit.explain(requestId: "app-cloud", includeTest: false)).explanation
            #expect(cloud.json.contains(#""labelledBy":{"ipRange":"34.64.0.0/10"}"#))
        }
    }

    /// A high_rate label names the limit its client went over.
    @Test func aHighRateLabelNamesItsLimit() async throws {
        try await withTestDatabase { db in
            let ruleSet = try IVTRuleSet.parse(Array(#"{"maxEventsPerClientMinute": 2}"#.utf8)) { _ in [] }
            _ = try await IVTRuleSets(pool: db.pool).activate(ruleSet)
            let burst = EventClient(userAgent: Self.person, ip: Self.home)
            try await db.append((0..<3).map { Events.make(.adLoaded, ad: "burst", at: Events.at(9, 0, $0)).sent(by: burst) })
            try await db.projector().catchUp()
            let trail = try #require(try await AdAudit(pool: db.pool).explain(requestId: "burst", includeTest: false)).explanation
            // The fixtures stamp receipt when made: normally one minute; a straddle splits the group.
            if Set(trail.events.compactMap { $0.receivedAt.map { $0.microseconds / 60_000_000 } }).count == 1 {
                #expect(trail.events.map(\.labelledBy) == Array(repeating: .maxEventsPerClientMinute(2), count: 3))
            }
        }
    }
}

import Foundation
import Testing
import Tracker

/// General invalid traffic: crawler user agents, data-center addresses, a burst from one
/// client and ads with many clicks, labelled under versioned rule sets; every report against a
/// plain computation (Foundation's regular expressions, ranges checked bit by bit),
/// incrementally, after a rebuild, and after a second rule set is activated and rebuilt.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct InvalidTrafficTests {
    static let bots = ["Googlebot/2.1 (+http://www.google.com/bot.html)", "curl/8.4.0",
                       "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)", "Mozilla/5.0 GOOGLEBOT-Image/1.0"]
    static let people = ["Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15", "Mozilla/5.0 (Linux; Android 14)", ""]
    static let dataCenters = ["34.64.0.7", "34.127.255.255", "2600:1900::5", "198.51.100.20"]
    /// A home address of its own for each ad (people do not share one).
    static func home(_ g: inout SeededGenerator) -> IPAddress {
        Bool.random(using: &g) ? IPAddress("192.0.2.\(Int.random(in: 1...254, using: &g))")!
            : IPAddress("2001:db8::\(String(Int.random(in: 1...65535, using: &g), radix: 16))")!
    }
    /// The client whose events go over `maxEventsPerClientMinute` in one minute.
    static let burst = EventClient(userAgent: "Mozilla/5.0 (burst)", ip: IPAddress("203.0.113.200"))

    static let first = """
        {"name": "tests 1", "userAgents": [{"pattern": "googlebot", "name": "google"}, {"pattern": "^curl/"}],
         "ipRanges": ["34.64.0.0/10", "2600:1900::/28"], "maxClicksPerAd": 1, "maxEventsPerClientMinute": 30}
        """
    static let firstRules = ReferenceReports.Rules(patterns: ["googlebot", "^curl/"], ranges: ["34.64.0.0/10", "2600:1900::/28"],
                                                   maxClicksPerAd: 1, maxEventsPerClientMinute: 30)
    static let second = """
        {"name": "tests 2", "userAgents": [{"pattern": "ahrefsbot|bot/[0-9]"}], "ipRanges": ["198.51.100.0/24"], "maxClicksPerAd": 2}
        """
    static let secondRules = ReferenceReports.Rules(patterns: ["ahrefsbot|bot/[0-9]"], ranges: ["198.51.100.0/24"], maxClicksPerAd: 2)

    /// Random traffic whose ads each have one client: people at home, crawlers, data centers,
    /// and one client behind 40 ads (a burst).
    static func traffic(ads: Int, seed: UInt64) -> [TrackingEvent] {
        var g = SeededGenerator(seed: seed)
        let events = RandomTraffic.events(ads: ads, using: &g)
        var clientOf: [String: EventClient] = [:]
        for ad in Set(events.map(\.logKey)).sorted() {
            let roll = Int.random(in: 0..<20, using: &g)
            clientOf[ad] = switch roll {
            case 0..<3: EventClient(userAgent: bots.randomElement(using: &g)!, ip: home(&g))
            case 3..<6: EventClient(userAgent: people.randomElement(using: &g)!, ip: IPAddress(dataCenters.randomElement(using: &g)!))
            case 6..<10: burst
            default: EventClient(userAgent: people.randomElement(using: &g)!, ip: home(&g))
            }
        }
        return events.map { $0.sent(by: clientOf[$0.logKey]!) }
    }

    func activate(_ document: String, _ db: TestDatabase) async throws -> Int {
        let ruleSet = try IVTRuleSet.parse(Array(document.utf8)) { name in throw CocoaError(.fileNoSuchFile, userInfo: ["name": name]) }
        return try await IVTRuleSets(pool: db.pool).activate(ruleSet)
    }

    func expectReference(_ db: TestDatabase, _ events: [TrackingEvent], _ rules: ReferenceReports.Rules, _ what: String,
                         sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let expected = ReferenceReports.csv(events, rules: rules)
        let got = try await db.reportsAsCSV()
        for (name, csv) in expected {
            #expect(got[name] == csv, "\(what): \(name)", sourceLocation: sourceLocation)
        }
    }

    @Test func labelsFollowTheRuleSetIncrementallyAfterRebuildAndUnderASecondRuleSet() async throws {
        try await withTestDatabase { db in
            let events = Self.traffic(ads: 160, seed: 5)
            #expect(try await activate(Self.first, db) == 1)
            var g = SeededGenerator(seed: 6)
            let projector = db.projector(batchSize: 50)
            for chunk in RandomTraffic.deliveries(of: events, chunks: 6, using: &g) {
                try await db.append(chunk)
                for _ in 0..<Int.random(in: 0...3, using: &g) { try await projector.step() }
            }
            try await projector.catchUp()
            #expect(try await db.scalar("SELECT ivt_rules FROM projection_state") == "1", "empty projections take the newest rule set")
            try await expectReference(db, events, Self.firstRules, "rule set 1, incremental")
            let ivt = try await db.reportsAsCSV()["ivt includeTest=false"] ?? ""
            for label in ["declared_bot", "datacenter", "high_rate", "excessive_clicks"] {
                #expect(ivt.contains(",\(label),"), "the traffic earns \(label):\n\(ivt)")
            }
            try await expectRebuildReproducesTheProjections(db)
            try await expectReference(db, events, Self.firstRules, "rule set 1, after rebuild")

            // A second rule set waits for a rebuild; new events meanwhile are labelled with the first.
            #expect(try await activate(Self.second, db) == 2)
            let more = Self.traffic(ads: 40, seed: 7)
            try await db.append(more)
            try await projector.catchUp()
            #expect(try await db.scalar("SELECT ivt_rules FROM projection_state") == "1")
            try await expectReference(db, events + more, Self.firstRules, "rule set 1 kept until the rebuild")
            try await Rebuild(pool: db.pool, logger: TestEnvironment.logger).run()
            #expect(try await db.scalar("SELECT ivt_rules FROM projection_state") == "2")
            try await expectReference(db, events + more, Self.secondRules, "rule set 2 after rebuild")

            // Then new events are labelled incrementally with rule set 2, as a rebuild would.
            let late = Self.traffic(ads: 30, seed: 8)
            try await db.append(late)
            try await projector.catchUp()
            try await expectReference(db, events + more + late, Self.secondRules, "rule set 2, incremental")
            try await expectRebuildReproducesTheProjections(db)
        }
    }

    /// A client's group goes over the limit only with its 31st event, in a later step than its
    /// first 30: those are labelled then, in their ads, and a retried delivery adds nothing.
    @Test func aGroupOverTheLimitLabelsItsEarlierEventsAndRetriesDoNotCount() async throws {
        try await withTestDatabase { db in
            _ = try await activate(#"{"maxEventsPerClientMinute": 30}"#, db)
            func impression(_ n: Int) -> TrackingEvent {
                Events.make(.impression, ad: "ad-\(n)", at: Events.at(10, n)).sent(by: Self.burst)
            }
            let first30 = (0..<30).map(impression)
            try await db.append(first30)
            try await db.projector().catchUp()
            #expect(try await db.reportsAsCSV()["ivt includeTest=false"]?.contains("high_rate") == false, "30 events are within the limit")
            try await db.append(first30)  // a retry: stored once, counted once
            try await db.projector().catchUp()
            #expect(try await db.scalar("SELECT events FROM client_minutes") == "30")
            let all = first30 + [impression(30)]
            try await db.append([impression(30)])
            try await db.projector().catchUp()
            // The fixtures stamp each event's receipt when it is made: normally all in one minute.
            let sameMinute = Set(all.map { $0.receivedAt.microseconds / 60_000_000 }).count == 1
            if sameMinute {
                try await expectReference(db, all, ReferenceReports.Rules(maxEventsPerClientMinute: 30), "the 31st event")
                #expect(try await db.scalar("SELECT count(*) FROM ad_events WHERE label = 'high_rate'") == "31")
            } else {
                // The events straddled a minute: the groups are split, as the reference says.
                try await expectReference(db, all, ReferenceReports.Rules(maxEventsPerClientMinute: 30), "split across minutes")
            }
            try await expectRebuildReproducesTheProjections(db)
        }
    }

    @Test func anInvalidPatternOrRangeRefusesTheWholeRuleSetNamingIt() async throws {
        let badPattern = #"{"userAgents": [{"pattern": "ok"}, {"pattern": "foo(bar"}]}"#
        #expect(throws: RuleSetError.self) { try IVTRuleSet.parse(Array(badPattern.utf8)) { _ in [] } }
        do {
            _ = try IVTRuleSet.parse(Array(badPattern.utf8)) { _ in [] }
        } catch {
            #expect("\(error)".contains("foo(bar"), "\(error)")
        }
        do {
            _ = try IVTRuleSet.parse(Array(#"{"ipRanges": ["10.0.0.0/8", "10.0.0.0/33"]}"#.utf8)) { _ in [] }
            Issue.record("a /33 was accepted")
        } catch {
            #expect("\(error)".contains("10.0.0.0/33"), "\(error)")
        }
    }
}

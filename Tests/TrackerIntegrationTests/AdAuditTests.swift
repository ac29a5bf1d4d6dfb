import Foundation
import Testing
import Tracker

/// `GET /v1/ads/{requestId}` against the reports: the explanations of a set of ads, summed by
/// PROTOCOL.md 6's "where a row counts a thing", are exactly the report rows of those ads.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct AdAuditTests {
    static let from = Events.day0.adding(days: -1).description, to = Events.day0.adding(days: 3).description

    @Test(arguments: [UInt64(21), 22])
    func explanationsOfRandomAdsSumToTheReportRows(seed: UInt64) async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: seed)
            let stream = RandomTraffic.events(ads: 200, using: &g)
            let ads = Array(Set(stream.compactMap(\.requestId)).sorted().shuffled(using: &g).prefix(40))
            let chosen = Set(ads)
            try await db.append(stream.filter { chosen.contains($0.requestId ?? "") })
            let key = try await db.createKey("ops", scope: .report)
            // The audit waits for the projector as a report does: 60 s, for a machine busy with the rest of the suite.
            try await withInProcessTracker(db, environment: ["TRACKER_REPORT_WAIT": "60"]) { tracker in
                for includeTest in [false, true] {
                    var summed = ReportRows()
                    for ad in ads {
                        let r = try await tracker.request("GET", "/v1/ads/\(ad)?includeTest=\(includeTest)",
                                                           headers: ["Authorization": "Bearer \(key)"])
                        try #require(r.status == 200, "\(ad): \(r.text)")
                        #expect((r.json["events"] as? [Any])?.count == stream.filter { $0.requestId == ad }.count)
                        summed.add(explanation: r.json)
                    }
                    for report in ReportRows.measures.keys.sorted() {
                        let r = try await tracker.request("GET", "/v1/reports/\(report)?from=\(Self.from)&to=\(Self.to)&includeTest=\(includeTest)",
                                                           headers: ["Authorization": "Bearer \(key)"])
                        try #require(r.status == 200)
                        let rows = ReportRows.rows(report: report, json: r.json)
                        #expect(summed.rows(report) == rows, "seed \(seed), \(report), includeTest=\(includeTest)")
                        #expect(!rows.isEmpty)
                    }
                }
            }
        }
    }

    @Test func anAdIsFoundByItsPercentEncodedIdAndAnUnknownOneIs404() async throws {
        try await withTestDatabase { db in
            let ad = "slot/1 ü"
            let impression = Events.make(.impression, ad: ad, at: Events.at(10))
            let click = Events.make(.click, ad: ad, at: Events.at(10, 0, 2), asset: "Headline")
            let double = Events.make(.click, ad: ad, at: Events.at(10, 0, 2, micros: 500_000), asset: "Headline", source: .sdk)
            try await db.append([impression, click, double])
            let key = try await db.createKey("ops", scope: .report)
            // The audit waits for the projector as a report does: 60 s, for a machine busy with the rest of the suite.
            try await withInProcessTracker(db, environment: ["TRACKER_REPORT_WAIT": "60"]) { tracker in
                let auth = ["Authorization": "Bearer \(key)"]
                let r = try await tracker.request("GET", "/v1/ads/slot%2F1%20%C3%BC", headers: auth)
                try #require(r.status == 200, "\(r.text)")
                #expect(r.json["requestId"] as? String == ad)
                #expect(r.json["countedImpression"] as? String == impression.id.text)
                #expect(r.json["doubleTrackedClicks"] as? Bool == true)
                let outcomes = (r.json["events"] as? [[String: Any]] ?? []).map { $0["outcome"] as? [String: Any] ?? [:] }
                #expect(outcomes.map { $0["kind"] as? String } == ["counted_impression", "counted_click", "duplicate_click"])
                #expect(outcomes[1]["attributedTo"] as? String == impression.id.text)
                #expect(outcomes[2]["duplicateOf"] as? String == click.id.text)
                #expect(r.headers["x-projection-lag-events"] == "0")

                #expect(try await tracker.request("GET", "/v1/ads/never-seen", headers: auth).status == 404)
                #expect(try await tracker.request("GET", "/v1/ads/bad%zz", headers: auth).status == 400)
                #expect(try await tracker.request("GET", "/v1/ads/slot%2F1%20%C3%BC").status == 401)
            }
            let (status, stdout, output) = try await runTrackerCommand(["explain", ad, "--database-url", db.url])
            #expect(status == 0, "\(output)")
            #expect(stdout.contains("counted click, attributed to \(impression.id.text)"), "\(stdout)")
            #expect(stdout.contains("duplicate click of \(click.id.text)"), "\(stdout)")
        }
    }

    /// Committed but not projected (no projector runs): the trail is read from the log's events
    /// after the checkpoint, with the lag saying how far the projections are behind; a key of no
    /// event stays 404.
    @Test func anAdTheProjectorHasNotReachedIsExplainedFromTheLog() async throws {
        try await withTestDatabase { db in
            let impression = Events.make(.impression, ad: "fresh", at: Events.at(10))
            let click = Events.make(.click, ad: "fresh", at: Events.at(10, 0, 2), asset: "Headline")
            try await db.append([impression, click, Events.make(.impression, ad: "other", at: Events.at(10))])
            let key = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db, environment: ["TRACKER_PROJECTOR": "off", "TRACKER_REPORT_WAIT": "0"]) { tracker in
                let auth = ["Authorization": "Bearer \(key)"]
                let r = try await tracker.request("GET", "/v1/ads/fresh", headers: auth)
                try #require(r.status == 200, "\(r.text)")
                #expect(r.json["countedImpression"] as? String == impression.id.text)
                let outcomes = (r.json["events"] as? [[String: Any]] ?? []).map { ($0["outcome"] as? [String: Any])?["kind"] as? String }
                #expect(outcomes == ["counted_impression", "counted_click"])
                #expect(r.headers["x-projection-lag-events"] == "3")
                #expect(try await tracker.request("GET", "/v1/ads/never-seen", headers: auth).status == 404)
            }
        }
    }
}

/// Report rows as the test reads them: dimensions joined by `|` to the integer measures.
struct ReportRows {
    static let dimensions = [
        "summary": ["day", "adUnit", "formatId"], "assets": ["day", "adUnit", "formatId", "assetKey"],
        "sources": ["day", "adUnit", "adapter"], "adchoices": ["day", "adUnit", "formatId"],
    ]
    static let measures = [
        "summary": ["impressions", "duplicateImpressions", "staleImpressions", "clicks", "duplicateClicks", "attributedClicks",
                    "unattributedClicks", "adchoicesImpressions", "adchoicesClicks", "videoPlays", "videoEnds"],
        "assets": ["clicks", "duplicateClicks", "attributedClicks", "noImpression", "beforeImpression", "outsideWindow"],
        "sources": ["appImpressions", "sdkImpressions", "mediationImpressions", "doubleTrackedImpressionAds", "doubleTrackedClickAds"],
        "adchoices": ["eeaReservationImpressions", "withAdChoices", "adchoicesClicks"],
    ]

    private var counts: [String: [String: [String: Int]]] = [:]

    static func rows(report: String, json: [String: Any]) -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        for row in json["rows"] as? [[String: Any]] ?? [] {
            let key = dimensions[report]!.map { row[$0] as? String ?? "" }.joined(separator: "|")
            out[key] = Dictionary(uniqueKeysWithValues: measures[report]!.map { ($0, row[$0] as? Int ?? -1) })
        }
        return out
    }

    /// The rows with every measure present (zeros included), rows of zeros left out, as the API answers.
    func rows(_ report: String) -> [String: [String: Int]] {
        var out: [String: [String: Int]] = [:]
        for (key, values) in counts[report] ?? [:] where values.values.contains(where: { $0 != 0 }) {
            out[key] = Dictionary(uniqueKeysWithValues: Self.measures[report]!.map { ($0, values[$0] ?? 0) })
        }
        return out
    }

    private mutating func count(_ report: String, _ event: [String: Any], _ measure: String) {
        let key = Self.dimensions[report]!.map { event[$0] as? String ?? "" }.joined(separator: "|")
        counts[report, default: [:]][key, default: [:]][measure, default: 0] += 1
    }

    /// Adds one ad's explanation, by PROTOCOL.md 6's list of where each measure is counted.
    mutating func add(explanation: [String: Any]) {
        let events = (explanation["events"] as? [[String: Any]] ?? []).map { e -> [String: Any] in
            var e = e
            e["adapter"] = e["adapter"] as? String ?? ""
            return e
        }
        let judged = events.filter { ($0["outcome"] as? [String: Any])?["kind"] as? String != "test_traffic" }
        let hasAdchoices = judged.contains { ($0["outcome"] as? [String: Any])?["kind"] as? String == "counted_adchoices_impression" }
        for e in judged {
            let outcome = e["outcome"] as? [String: Any] ?? [:]
            switch outcome["kind"] as? String {
            case "counted_impression":
                count("summary", e, "impressions")
                if outcome["stale"] as? Bool == true { count("summary", e, "staleImpressions") }
                count("sources", e, "\(e["source"] as? String ?? "")Impressions")
                if explanation["doubleTrackedImpressions"] as? Bool == true { count("sources", e, "doubleTrackedImpressionAds") }
                if e["eea"] as? Bool == true, e["reservation"] as? Bool == true {
                    count("adchoices", e, "eeaReservationImpressions")
                    if hasAdchoices { count("adchoices", e, "withAdChoices") }
                }
            case "duplicate_impression":
                count("summary", e, "duplicateImpressions")
                count("sources", e, "\(e["source"] as? String ?? "")Impressions")
            case "counted_click":
                count("summary", e, "clicks")
                count("assets", e, "clicks")
                if outcome["attributedTo"] != nil {
                    count("summary", e, "attributedClicks")
                    count("assets", e, "attributedClicks")
                } else {
                    count("summary", e, "unattributedClicks")
                    let reason = outcome["unattributedReason"] as? String ?? ""
                    count("assets", e, ["no_impression": "noImpression", "before_impression": "beforeImpression",
                                        "outside_window": "outsideWindow"][reason] ?? reason)
                }
            case "duplicate_click":
                count("summary", e, "duplicateClicks")
                count("assets", e, "duplicateClicks")
            case "counted_adchoices_impression":
                count("summary", e, "adchoicesImpressions")
            case "adchoices_click":
                count("summary", e, "adchoicesClicks")
                count("adchoices", e, "adchoicesClicks")
            case "video":
                if let measure = outcome["countedAs"] as? String { count("summary", e, measure) }
            default:
                break
            }
        }
        if explanation["doubleTrackedClicks"] as? Bool == true, let first = judged.first(where: { $0["type"] as? String == "click" }) {
            count("sources", first, "doubleTrackedClickAds")
        }
    }
}

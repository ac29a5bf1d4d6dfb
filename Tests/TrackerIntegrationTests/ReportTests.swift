import Foundation
import Testing
import Tracker

/// GET /v1/reports/… and `tracker report` as a user sees them (PROTOCOL.md section 6).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ReportTests {
    static let home = "/1234/home/native", feed = "/1234/feed/native"
    static let day0 = Events.day0.description, day1 = Events.day0.adding(days: 1).description

    /// Four ads over two days: attributed, duplicate and out-of-window clicks, a double-tracked
    /// impression, an AdChoices icon on one of two EEA reservation ads, and one test ad.
    static func traffic() -> [TrackingEvent] {
        [
            Events.make(.impression, ad: "a1", at: Events.at(10), adUnit: home, eea: true, reservation: true),
            Events.make(.adchoicesImpression, ad: "a1", at: Events.at(10, 0, 1), adUnit: home),
            Events.make(.click, ad: "a1", at: Events.at(10, 0, 30), adUnit: home),
            Events.make(.click, ad: "a1", at: Events.at(10, 0, 30, micros: 500_000), adUnit: home),
            Events.make(.impression, ad: "a2", at: Events.at(11), adUnit: home, eea: true, reservation: true),
            Events.make(.click, ad: "a2", at: Events.at(12, 30), adUnit: home, asset: "Headline"),
            Events.make(.impression, ad: "a3", at: Events.at(day: 1, 9), adUnit: feed, formatId: "native"),
            Events.make(.impression, ad: "a3", at: Events.at(day: 1, 9, 0, 2), adUnit: feed, formatId: "native",
                        source: .sdk),
            Events.make(.impression, ad: "a4", at: Events.at(13), adUnit: home, test: true),
        ]
    }

    /// A served database with `traffic()` projected, and a report key.
    func withServedTraffic(_ body: @Sendable (TestDatabase, InProcessTracker, String) async throws -> Void) async throws {
        try await withTestDatabase { db in
            try await db.append(Self.traffic())
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db) { tracker in
                try await waitUntilCaughtUp(tracker)
                try await body(db, tracker, key)
            }
        }
    }

    func get(_ tracker: some TrackerHTTP, _ path: String, key: String?, headers: [String: String] = [:]) async throws -> HTTPClient.Response {
        var h = headers
        if let key { h["Authorization"] = "Bearer \(key)" }
        return try await tracker.request("GET", path, headers: h)
    }

    @Test func summaryJSONHasTheSpecShapeSortedRowsAndIntegerCounts() async throws {
        try await withServedTraffic { _, tracker, key in
            let r = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)", key: key)
            #expect(r.status == 200)
            #expect(r.headers["content-type"]?.hasPrefix("application/json") == true)
            let json = r.json
            #expect(json["from"] as? String == Self.day0)
            #expect(json["to"] as? String == Self.day1)
            let rows = try #require(json["rows"] as? [[String: Any]])
            #expect(rows.count == 2)
            #expect(rows.map { $0["day"] as? String } == [Self.day0, Self.day1])
            let home = rows[0]
            #expect(home["adUnit"] as? String == Self.home)
            #expect(home["formatId"] as? String == "10063170")
            let expected: [String: Int] = [
                "impressions": 2, "duplicateImpressions": 0, "staleImpressions": 0, "clicks": 2, "duplicateClicks": 1,
                "attributedClicks": 1, "unattributedClicks": 1, "adchoicesImpressions": 1, "adchoicesClicks": 0,
                "videoPlays": 0, "videoEnds": 0, "givtImpressions": 0, "givtClicks": 0,
            ]
            for (name, value) in expected { #expect(home[name] as? Int == value, "\(name)") }
            #expect(home["ctr"] as? Double == 0.5)
            #expect(Set(home.keys) == Set(expected.keys).union(["day", "adUnit", "formatId", "ctr"]))
            #expect(r.text.contains("\"impressions\":2,"), "counts are JSON integers")
            #expect(rows[1]["duplicateImpressions"] as? Int == 1)
            #expect(rows[1]["ctr"] as? Double == 0, "ctr is 0 for a row without attributed clicks")
        }
    }

    @Test func reportsCarryProjectionLagInTheirMetadataAndReadyzShowsIt() async throws {
        try await withServedTraffic { _, tracker, key in
            let report = try await get(tracker, "/v1/reports/sources?from=\(Self.day0)&to=\(Self.day1)", key: key)
            #expect(Set(report.json.keys) == ["from", "to", "ivtRules", "rows"], "the body is exactly the protocol's shape")
            #expect(report.json["ivtRules"] as? Int == 0, "a fresh database labels with the empty rule set")
            #expect(report.headers["x-ivt-rules"] == "0")
            #expect(report.headers["x-projection-lag-events"] == "0")
            #expect(report.headers["x-projection-lag-seconds"].flatMap(Double.init) == 0)
            let ready = try await tracker.request("GET", "/readyz").json
            #expect((ready["projectionLag"] as? [String: Any])?["events"] as? Int == 0)
        }
    }

    /// Read your writes: a report asked right after a 200 counts that batch, over HTTP and on the
    /// command line (the projector polls every 100 ms, so without the wait most rounds would miss).
    /// The wait is 60 s: other tests' open transactions may hold the projector back.
    @Test func aReportAskedRightAfterIngestionCountsTheBatch() async throws {
        try await withTestDatabase { db in
            let (ingest, report) = (try await db.createKey("app", scope: .ingest), try await db.createKey("analyst", scope: .report))
            try await withInProcessTracker(db, environment: ["TRACKER_REPORT_WAIT": "60"]) { tracker in
                let (from, to) = (Wire.isoNow(offsetSeconds: -86_400).prefix(10), Wire.isoNow(offsetSeconds: 86_400).prefix(10))
                func impressions(_ json: [String: Any]) -> Int {
                    (json["rows"] as? [[String: Any]] ?? []).reduce(0) { $0 + ($1["impressions"] as? Int ?? 0) }
                }
                for round in 1...6 {
                    let batch = Wire.batch([Wire.event(requestId: "ad-\(round)"), Wire.event(requestId: "ad-\(round)")])
                    #expect(try await tracker.postEvents(batch, key: ingest).status == 200)
                    if round.isMultiple(of: 2) {
                        // stdout alone: what the command says of the wait goes to stderr.
                        let (status, out, output) = try await runTrackerCommand(["report", "summary", "--from", String(from), "--to", String(to),
                                                                                 "--output", "json", "--database-url", db.url],
                                                                                environment: ["TRACKER_REPORT_WAIT": "60"])
                        #expect(status == 0, "\(output)")
                        let json = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any] ?? [:]
                        #expect(impressions(json) == round, "tracker report after batch \(round): \(out)")
                    } else {
                        let r = try await get(tracker, "/v1/reports/summary?from=\(from)&to=\(to)", key: report)
                        #expect(impressions(r.json) == round, "GET after batch \(round): \(r.text)")
                        #expect(r.headers["x-projection-lag-events"] == "0")
                    }
                }
            }
        }
    }

    @Test func lagGrowsWhenNoProjectorRuns() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db, environment: ["TRACKER_PROJECTOR": "off"]) { tracker in
                try await db.append(Self.traffic())
                try await Task.sleep(for: .milliseconds(1100))
                let ready = try await tracker.request("GET", "/readyz")
                let lag = try #require(ready.json["projectionLag"] as? [String: Any])
                #expect(lag["events"] as? Int == Self.traffic().count)
                #expect((lag["seconds"] as? Double ?? 0) >= 1)
                let report = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)", key: key)
                #expect(report.headers["x-projection-lag-events"] == String(Self.traffic().count))
                #expect((report.json["rows"] as? [Any])?.isEmpty == true, "nothing projected yet")
            }
        }
    }

    @Test func csvByAcceptHeaderAndByFormatParameterHasTheSameColumns() async throws {
        try await withServedTraffic { _, tracker, key in
            let path = "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)"
            let byHeader = try await get(tracker, path, key: key, headers: ["Accept": "text/csv"])
            let byParameter = try await get(tracker, path + "&format=csv", key: key)
            #expect(byHeader.status == 200)
            #expect(byHeader.headers["content-type"]?.hasPrefix("text/csv") == true)
            #expect(byHeader.text == byParameter.text)
            #expect(byHeader.text == """
                day,adUnit,formatId,impressions,duplicateImpressions,staleImpressions,clicks,duplicateClicks,attributedClicks,unattributedClicks,ctr,adchoicesImpressions,adchoicesClicks,videoPlays,videoEnds,givtImpressions,givtClicks
                \(Self.day0),\(Self.home),10063170,2,0,0,2,1,1,1,0.5,1,0,0,0,0,0
                \(Self.day1),\(Self.feed),native,1,1,0,0,0,0,0,0.0,0,0,0,0,0,0

                """)
        }
    }

    @Test func assetsSourcesAndAdchoicesReportsCountWhereSpecSays() async throws {
        try await withServedTraffic { _, tracker, key in
            func csv(_ report: String) async throws -> String {
                try await get(tracker, "/v1/reports/\(report)?from=\(Self.day0)&to=\(Self.day1)&format=csv", key: key).text
            }
            let assets = try await csv("assets")
            #expect(assets == """
                day,adUnit,formatId,assetKey,clicks,duplicateClicks,attributedClicks,noImpression,beforeImpression,outsideWindow
                \(Self.day0),\(Self.home),10063170,Headline,1,0,0,0,0,1
                \(Self.day0),\(Self.home),10063170,MainImage,1,1,1,0,0,0

                """)
            let sources = try await csv("sources")
            #expect(sources == """
                day,adUnit,adapter,appImpressions,sdkImpressions,mediationImpressions,doubleTrackedImpressionAds,doubleTrackedClickAds
                \(Self.day0),\(Self.home),,2,0,0,0,0
                \(Self.day1),\(Self.feed),,1,1,0,1,0

                """)
            let adchoices = try await csv("adchoices")
            #expect(adchoices == """
                day,adUnit,formatId,eeaReservationImpressions,withAdChoices,share,adchoicesClicks
                \(Self.day0),\(Self.home),10063170,2,1,0.5,0

                """)
        }
    }

    @Test func filtersSelectRowsAndIncludeTestAddsTestTraffic() async throws {
        try await withServedTraffic { _, tracker, key in
            let base = "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)"
            let byUnit = try await get(tracker, base + "&adUnit=%2F1234%2Ffeed%2Fnative", key: key).json["rows"] as? [[String: Any]]
            #expect(byUnit?.map { $0["adUnit"] as? String } == [Self.feed])
            let byFormat = try await get(tracker, base + "&formatId=10063170", key: key).json["rows"] as? [[String: Any]]
            #expect(byFormat?.map { $0["formatId"] as? String } == ["10063170"])
            let oneDay = try await get(tracker, "/v1/reports/summary?from=\(Self.day1)&to=\(Self.day1)", key: key).json["rows"] as? [[String: Any]]
            #expect(oneDay?.count == 1)
            let withTest = try await get(tracker, base + "&includeTest=true", key: key).json["rows"] as? [[String: Any]]
            #expect(withTest?.first?["impressions"] as? Int == 3)
            #expect(withTest?.first?["ctr"] as? Double == 1.0 / 3.0)
        }
    }

    @Test(arguments: [
        ("/v1/reports/revenue?from=2026-11-10&to=2026-11-11", "unknown report 'revenue'"),
        ("/v1/reports/summary?from=2026-11-1&to=2026-11-11", "from must be a UTC day as YYYY-MM-DD, got '2026-11-1'"),
        ("/v1/reports/summary?from=2026-02-30&to=2026-03-01", "from must be a UTC day"),
        ("/v1/reports/summary?from=2026-11-10", "to is required"),
        ("/v1/reports/summary?from=2026-11-12&to=2026-11-10", "from (2026-11-12) is after to (2026-11-10)"),
        ("/v1/reports/summary?from=2025-11-10&to=2026-11-11", "spans 367 days; at most 366"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&includeTest=maybe", "includeTest must be true or false"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&format=xml", "format must be json or csv"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&tz=Mars/Olympus_Mons", "tz must be an IANA time zone name"),
        ("/v1/reports/assets?from=2026-11-10&to=2026-11-11&tz=America%2FNew%20York", "got 'America/New York'"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&granularity=week", "granularity must be day or hour, got 'week'"),
        ("/v1/reports/sources?from=2026-11-1&to=2026-11-11&tz=Asia/Kolkata", "from must be a local day in Asia/Kolkata"),
        // A filter that could match no ad unit or format is refused, not answered with no rows.
        ("/v1/reports/funnel?from=2026-11-10&to=2026-11-11&adUnit=bogus", "adUnit must be an ad unit path such as /6499/example/native, or a path ending in /"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&adUnit=1234%2Fhome%2Fnative", "got '1234/home/native'"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&adUnit=%2F1234%2F%2F", "adUnit must be an ad unit path"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&adUnit=%2Fnews%2F", "adUnit must be an ad unit path"),
        ("/v1/reports/assets?from=2026-11-10&to=2026-11-11&formatId=bogus", "formatId must be a custom native format ID (digits, e.g. 10063170) or one of native"),
        ("/v1/reports/summary?from=2026-11-10&to=2026-11-11&formatId=\(String(repeating: "1", count: 65))", "formatId must be at most 64 digits, got 65"),
        ("/v1/reports/reconciliation?formatId=native", "formatId is not a parameter of the reconciliation report"),
        ("/v1/reports/reconciliation?adUnitLevel=1", "adUnitLevel is not a parameter of the reconciliation report"),
        ("/v1/reports/reconciliation?adUnit=bogus", "adUnit must be an ad unit path"),
    ])
    func badParametersAre400WithAMessageThatSaysWhatToFix(path: String, message: String) async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let r = try await get(tracker, path, key: key)
                #expect(r.status == 400)
                #expect((r.json["error"] as? String)?.isEmpty == false)
                #expect((r.json["message"] as? String)?.contains(message) == true, "\(r.text)")
            }
        }
    }

    @Test func a366DayRangeIsAllowed() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let status = try await get(tracker, "/v1/reports/summary?from=2025-11-11&to=2026-11-11", key: key).status
                #expect(status == 200)
            }
        }
    }

    @Test func reportsNeedAKeyOfReportScope() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let path = "/v1/reports/summary?from=2026-11-10&to=2026-11-11"
                #expect(try await get(tracker, path, key: nil).status == 401)
                #expect(try await get(tracker, path, key: "tk_not_a_key").status == 401)
                let forbidden = try await get(tracker, path, key: ingest)
                #expect(forbidden.status == 403)
                #expect(forbidden.json["error"] is String)
            }
        }
    }

    @Test func commandLinePrintsTheSameRowsAsHTTP() async throws {
        try await withServedTraffic { db, tracker, key in
            for report in ["summary", "assets", "sources", "adchoices"] {
                let http = try await get(tracker, "/v1/reports/\(report)?from=\(Self.day0)&to=\(Self.day1)&includeTest=true&format=csv", key: key).text
                let cli = try await runTrackerCommand(["report", report, "--from", Self.day0, "--to", Self.day1, "--include-test",
                                                       "--output", "csv", "--database-url", db.url])
                #expect(cli.status == 0)
                #expect(cli.stdout == http, "\(report)")
            }
            for (zone, granularity) in [("America/New_York", "hour"), ("Asia/Kathmandu", "day")] {
                let http = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)&tz=\(zone)&granularity=\(granularity)&format=csv",
                                   key: key).text
                let cli = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--tz", zone,
                                                       "--granularity", granularity, "--output", "csv", "--database-url", db.url])
                #expect(cli.status == 0)
                #expect(cli.stdout == http, "\(zone) by \(granularity)")
                #expect(http.hasPrefix(granularity == "hour" ? "day,hour,adUnit," : "day,adUnit,"), "\(http)")
            }
            let (_, json) = try await runTrackerToEnd(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--ad-unit", Self.feed,
                                                 "--format-id", "native", "--output", "json", "--database-url", db.url])
            let rows = (try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["rows"] as? [[String: Any]]
            #expect(rows?.count == 1)
            #expect(rows?.first?["duplicateImpressions"] as? Int == 1)
        }
    }

    @Test func commandLineTableIsAligned() async throws {
        try await withServedTraffic { db, _, _ in
            let run = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--database-url", db.url])
            #expect(run.status == 0)
            let table = run.stdout
            let lines = table.split(separator: "\n").map(String.init)
            #expect(lines.count == 4, "a header, two rows and the Total:\n\(table)")
            #expect(lines[3].hasPrefix("Total "))
            #expect(run.output.hasSuffix("summary from \(Self.day0) to \(Self.day1), local days in UTC\n"), "standard error names the zone")
            #expect(lines[0].hasPrefix("day         adUnit"))
            #expect(Set(lines.map(\.count)).count == 1, "every line as wide as the header:\n\(table)")
            // Numbers are right-aligned: each header name ends where its values end.
            let header = lines[0]
            for name in ["impressions", "ctr", "videoEnds"] {
                let end = header.range(of: " " + name)!.upperBound
                for line in lines.dropFirst() { #expect(line[line.index(before: end)] != " ", "\(name): \(line)") }
            }
        }
    }

    @Test func commandLineRejectsBadParametersWithTheSameMessages() async throws {
        try await withTestDatabase { db in
            let (status, output) = try await runTrackerToEnd(["report", "summary", "--from", "2026-11-12", "--to", "2026-11-10",
                                                        "--database-url", db.url])
            #expect(status != 0)
            #expect(output.contains("from (2026-11-12) is after to (2026-11-10)"), "\(output)")
            let (unknown, message) = try await runTrackerToEnd(["report", "revenue", "--from", "2026-11-10", "--to", "2026-11-10",
                                                          "--database-url", db.url])
            #expect(unknown != 0)
            #expect(message.contains("unknown report 'revenue'"))
            let (bogus, refused) = try await runTrackerToEnd(["report", "funnel", "--from", "2026-11-10", "--to", "2026-11-10",
                                                             "--ad-unit", "bogus", "--database-url", db.url])
            #expect(bogus != 0)
            #expect(refused.contains("adUnit must be an ad unit path"), "\(refused)")
            let (format, notHere) = try await runTrackerToEnd(["report", "reconciliation", "--format-id", "native", "--database-url", db.url])
            #expect(format != 0)
            #expect(notHere.contains("formatId is not a parameter of the reconciliation report"), "\(notHere)")
        }
    }
}

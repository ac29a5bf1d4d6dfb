import Foundation
import Testing
import Tracker

/// Ad Manager exports imported over HTTP and the command line, in both header styles, with a
/// unit map, unmatched units, split rows and zero counts, and refused whole when malformed; the
/// report against a plain computation from the same events and the same file.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ReconciliationTests {
    static let top = "/6499/sports/top", home = "/1234/home/native", feed = "/1234/feed/native"
    static let zone = "America/New_York"
    /// 2026-11-10 and 11 are local days in New York: 05:00Z to 05:00Z.
    static func ny(day: Int, _ hour: Int, _ minute: Int = 0) -> Timestamp {
        Day(year: 2026, month: 11, day: 10 + day)!.start + .seconds((hour + 5) * 3600 + minute * 60)
    }

    /// Impressions, duplicates and clicks on three ad units over two New York days, with some
    /// just before local midnight (which UTC would put on the next day).
    static func events() -> [TrackingEvent] {
        var out: [TrackingEvent] = []
        for i in 0..<12 {
            out.append(Events.make(.impression, ad: "t\(i)", at: ny(day: 0, 10, i), adUnit: top))
            if i % 3 == 0 { out.append(Events.make(.click, ad: "t\(i)", at: ny(day: 0, 10, i) + .seconds(5), adUnit: top)) }
        }
        out.append(Events.make(.impression, ad: "t0", at: ny(day: 0, 10, 0) + .seconds(2), adUnit: top, source: .sdk))
        for i in 0..<4 { out.append(Events.make(.impression, ad: "h\(i)", at: ny(day: 0, 23, 30 + i), adUnit: home)) }
        out.append(Events.make(.click, ad: "h0", at: ny(day: 0, 23, 31), adUnit: home))
        for i in 0..<3 { out.append(Events.make(.impression, ad: "f\(i)", at: ny(day: 1, 9, i), adUnit: feed)) }
        out.append(Events.make(.impression, ad: "x", at: ny(day: 1, 9), adUnit: "/6499/example/native"))  // test traffic
        // Loads of the top unit: three asked for, two filled with ads that t0 and t1 show, one failed.
        for l in 0..<3 {
            out.append(Events.load(.adRequest, "load-\(l)", at: ny(day: 0, 9, 59) + .seconds(l), adUnit: top))
        }
        for l in 0..<2 {
            out.append(Events.make(.adLoaded, ad: "t\(l)", at: ny(day: 0, 10), adUnit: top, loadId: "load-\(l)", latencyMs: 400))
        }
        out.append(Events.load(.adFailed, "load-2", at: ny(day: 0, 10), adUnit: top, errorCode: .noFill))
        return out
    }

    static let uiExport = """
        Date,Ad unit,Ad server impressions,Ad server clicks,Ad server CTR\r
        2026-11-10,top,"1,000",10,1.00%\r
        2026-11-10,top,5,0,0.00%\r
        2026-11-10,native,7,1,14.29%\r
        2026-11-10,/1234/home/native,4,1,25.00%\r
        2026-11-11,/6499/sports/top,0,0,0.00%\r
        2026-11-11,ghost,4,0,0.00%\r
        Total,,1020,12,1.18%\r

        """

    /// The report's rows computed the plain way: the reference summary in New York days summed
    /// over formats, next to the file's matched rows summed by day and unit.
    static func expectedRows(_ events: [TrackingEvent], file: [[String]: (Int64, Int64)], threshold: Double) -> [[String: String]] {
        let reference = ReferenceReports.compute(events, includeTest: false, windowMicros: 3_600_000_000, clock: .init(zone, hourly: false))
        var tracker: [[String]: [String: Int64]] = [:]
        for kind in [ReportKind.summary, .funnel] {
            for (key, row) in reference[kind] ?? [:] {
                for (name, value) in row where !name.hasPrefix("latency:") { tracker[[key[0], key[1]], default: [:]][name, default: 0] += value }
            }
        }
        let measures = ["impressions", "clicks", "duplicateImpressions", "givtImpressions", "staleImpressions", "givtClicks", "duplicateClicks",
                        "requests", "loadedAds", "shownAds"]
        tracker = tracker.filter { _, row in measures.contains { (row[$0] ?? 0) != 0 } }
        return Set(tracker.keys).union(file.keys).sorted { $0.lexicographicallyPrecedes($1) }.map { key in
            let t = tracker[key] ?? [:]
            let (ami, amc) = file[key] ?? (0, 0)
            func d(_ ours: Int64, _ theirs: Int64) -> Double? { theirs == 0 ? nil : Double(ours - theirs) / Double(theirs) }
            let di = d(t["impressions"] ?? 0, ami), dc = d(t["clicks"] ?? 0, amc)
            func within(_ x: Double?, _ ours: Int64) -> Bool { x.map { abs($0) <= threshold } ?? (ours == 0) }
            var row = ["day": key[0], "adUnit": key[1], "adManagerImpressions": String(ami), "adManagerClicks": String(amc),
                       "impressionDiscrepancy": di.map { String($0) } ?? "null", "clickDiscrepancy": dc.map { String($0) } ?? "null",
                       "withinTolerance": String(within(di, t["impressions"] ?? 0) && within(dc, t["clicks"] ?? 0))]
            for m in measures { row[m] = String(t[m] ?? 0) }
            return row
        }
    }

    static func rows(_ json: [String: Any]) -> [[String: String]] {
        ((json["rows"] as? [[String: Any]]) ?? []).map { row in
            row.mapValues { value -> String in
                if value is NSNull { return "null" }
                if String(describing: type(of: value)).contains("Boolean") { return (value as? Bool) == true ? "true" : "false" }
                if let d = value as? Double, d.rounded() != d { return String(d) }
                return "\(value)"
            }
        }
    }

    func post(_ tracker: some TrackerHTTP, _ body: String, key: String, tz: String? = zone, contentType: String = "text/csv") async throws -> HTTPClient.Response {
        try await tracker.request("POST", "/v1/reconciliations" + (tz.map { "?tz=\($0)" } ?? ""),
                                   headers: ["Authorization": "Bearer \(key)", "Content-Type": contentType], body: Data(body.utf8))
    }

    @Test func anImportInTheUIsHeadersIsComparedWithTheTrackerPerLocalDayAndAdUnit() async throws {
        try await withTestDatabase { db in
            let events = Self.events()
            try await db.append(events)
            try await db.projector().catchUp()
            let key = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let imported = try await post(tracker, Self.uiExport, key: key)
                #expect(imported.status == 200, "\(imported.text)")
                let answer = imported.json
                #expect(answer["tz"] as? String == Self.zone)
                #expect(answer["rows"] as? Int == 6, "the Total row is not a row")
                #expect(answer["matched"] as? Int == 4)
                #expect(answer["existing"] as? Bool == false)
                let unmatched = (answer["unmatched"] as? [[String: Any]])?.map { "\($0["row"]!):\($0["adUnit"]!):\($0["reason"]!)" }
                #expect(unmatched == ["4:native:ambiguous", "7:ghost:unknown"], "native is the last segment of two known units; ghost of none")
                let id = try #require(answer["id"] as? String)

                let again = try await post(tracker, Self.uiExport, key: key)
                #expect(again.json["id"] as? String == id)
                #expect(again.json["existing"] as? Bool == true)
                #expect(try await db.scalar("SELECT count(*) FROM reconciliation_imports") == "1")

                for threshold in [0.10, 0.5] {
                    let r = try await tracker.request("GET", "/v1/reports/reconciliation?threshold=\(threshold)",
                                                       headers: ["Authorization": "Bearer \(key)"])
                    #expect(r.status == 200, "\(r.text)")
                    let json = r.json
                    #expect(json["import"] as? String == id)
                    #expect(json["from"] as? String == "2026-11-10" && json["to"] as? String == "2026-11-11")
                    #expect(json["tz"] as? String == Self.zone && json["threshold"] as? Double == threshold && json["ivtRules"] as? Int == 0)
                    let file: [[String]: (Int64, Int64)] = [["2026-11-10", Self.top]: (1005, 10), ["2026-11-10", Self.home]: (4, 1),
                                                             ["2026-11-11", Self.top]: (0, 0)]
                    #expect(Self.rows(json) == Self.expectedRows(events, file: file, threshold: threshold), "\(r.text)")
                }
                let csv = try await tracker.request("GET", "/v1/reports/reconciliation?import=\(id)&format=csv",
                                                     headers: ["Authorization": "Bearer \(key)"]).text
                #expect(csv.hasPrefix("day,adUnit,adManagerImpressions,impressions,impressionDiscrepancy,adManagerClicks,clicks,clickDiscrepancy,withinTolerance,duplicateImpressions,givtImpressions,staleImpressions,givtClicks,duplicateClicks,requests,loadedAds,shownAds\n"),
                        "no Ad Manager requests in this file, so no column for them")
                #expect(csv.contains("2026-11-11,/6499/sports/top,0,0,,0,0,,true,"), "zero on both sides is within tolerance: \(csv)")
                #expect(csv.contains("2026-11-11,/1234/feed/native,0,3,,0,0,,false,"), "counts Ad Manager does not have are outside it: \(csv)")

                let list = try await tracker.request("GET", "/v1/reconciliations", headers: ["Authorization": "Bearer \(key)"]).json
                #expect(((list["imports"] as? [[String: Any]])?.first?["id"] as? String) == id)
                let one = try await tracker.request("GET", "/v1/reconciliations/\(id)", headers: ["Authorization": "Bearer \(key)"])
                #expect(one.json["matched"] as? Int == 4)
                #expect(try await tracker.request("GET", "/v1/reconciliations/abc123", headers: ["Authorization": "Bearer \(key)"]).status == 404)
            }
        }
    }

    /// A file with Ad Manager's total ad requests: each row gains them and their discrepancy from
    /// the funnel's requests, which then counts for the tolerance too.
    @Test func aFileWithRequestsIsComparedWithTheFunnelsRequests() async throws {
        try await withTestDatabase { db in
            try await db.append(Self.events())
            try await db.projector().catchUp()
            let key = try await db.createKey("ops", scope: .report)
            let export = """
                Dimension.DATE,Dimension.AD_UNIT_NAME,Column.AD_SERVER_IMPRESSIONS,Column.AD_SERVER_CLICKS,Column.TOTAL_AD_REQUESTS
                2026-11-10,/6499/sports/top,12,4,4
                2026-11-10,/1234/home/native,4,1,0
                """
            try await withInProcessTracker(db) { tracker in
                #expect(try await post(tracker, export, key: key).status == 200)
                let r = try await tracker.request("GET", "/v1/reports/reconciliation", headers: ["Authorization": "Bearer \(key)"])
                let rows = (r.json["rows"] as? [[String: Any]]) ?? []
                let top = try #require(rows.first { $0["adUnit"] as? String == Self.top })
                #expect(top["requests"] as? Int == 3 && top["adManagerRequests"] as? Int == 4)
                #expect(top["requestDiscrepancy"] as? Double == -0.25)
                #expect(top["loadedAds"] as? Int == 2 && top["shownAds"] as? Int == 2)
                #expect(top["withinTolerance"] as? Bool == false, "the requests are 25 % short: \(top)")
                let home = try #require(rows.first { $0["adUnit"] as? String == Self.home })
                #expect(home["requestDiscrepancy"] is NSNull && home["withinTolerance"] as? Bool == true, "0 requests on both sides: \(home)")
                let csv = try await tracker.request("GET", "/v1/reports/reconciliation?format=csv", headers: ["Authorization": "Bearer \(key)"]).text
                #expect(csv.hasPrefix("day,adUnit,adManagerImpressions,impressions,impressionDiscrepancy,adManagerClicks,clicks,clickDiscrepancy,withinTolerance,duplicateImpressions,givtImpressions,staleImpressions,givtClicks,duplicateClicks,requests,loadedAds,shownAds,adManagerRequests,requestDiscrepancy\n"))
            }
        }
    }

    /// Every report takes tz and granularity; the reconciliation's days are its import's, so a
    /// tz is accepted when it is the import's zone and refused, naming it, otherwise; by hour is
    /// refused (Ad Manager's rows are days); over HTTP and the command line alike.
    @Test func theReconciliationReportTakesOnlyItsImportsZoneAndDays() async throws {
        try await withTestDatabase { db in
            try await db.append(Self.events())
            try await db.projector().catchUp()
            let key = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                #expect(try await post(tracker, Self.uiExport, key: key).status == 200)
                func report(_ query: String) async throws -> (status: Int, message: String) {
                    let r = try await tracker.request("GET", "/v1/reports/reconciliation?\(query)", headers: ["Authorization": "Bearer \(key)"])
                    return (r.status, r.json["message"] as? String ?? "")
                }
                #expect(try await report("tz=America/New_York").status == 200, "the import's own zone")
                #expect(try await report("tz=america/new_york&granularity=day").status == 200, "zone names are matched as PostgreSQL matches them")
                for (query, parameter) in [("tz=Mars/Base", "tz"), ("tz=bad%20zone", "tz"), ("tz=UTC", "tz"), ("tz=Asia/Kolkata", "tz"),
                                           ("granularity=hour", "granularity"), ("granularity=week", "granularity")] {
                    let (status, message) = try await report(query)
                    #expect(status == 400 && message.hasPrefix(parameter), "\(query): \(status) \(message)")
                }
                let cli = try await runTrackerCommand(["report", "reconciliation", "--tz", "UTC", "--database-url", db.url])
                #expect(cli.status != 0 && cli.output.contains("tz must be the import's time zone, America/New_York"), "\(cli.output)")
                let same = try await runTrackerCommand(["report", "reconciliation", "--tz", Self.zone, "--output", "json", "--database-url", db.url])
                #expect(same.status == 0, "\(same.output)")
            }
        }
    }

    /// The command line imports the API's headers with a unit map and prints the same report as HTTP.
    @Test func theCommandLineImportsWithAUnitMapAndReportsLikeHTTP() async throws {
        try await withTestDatabase { db in
            let events = Self.events()
            try await db.append(events)
            try await db.projector().catchUp()
            let key = try await db.createKey("ops", scope: .report)
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rec-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            let export = """
                Dimension.DATE,Dimension.AD_UNIT_NAME,Column.AD_SERVER_IMPRESSIONS,Column.AD_SERVER_CLICKS
                2026-11-10,Sports Top,13,4
                2026-11-11,Feed,3,0
                2026-11-11,native,1,0

                """
            try Data(export.utf8).write(to: dir.appendingPathComponent("export.csv"))
            try Data("adManager,adUnit\nSports Top,\(Self.top)\nFeed,\(Self.feed)\n".utf8).write(to: dir.appendingPathComponent("units.csv"))
            let (status, output) = try await runTrackerToEnd(["reconcile", "import", dir.appendingPathComponent("export.csv").path,
                                                              "--tz", Self.zone, "--unit-map", dir.appendingPathComponent("units.csv").path,
                                                              "--output", "json", "--database-url", db.url])
            #expect(status == 0, "\(output)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])
            #expect(answer["matched"] as? Int == 2)
            let id = try #require(answer["id"] as? String)
            let (_, list) = try await runTrackerToEnd(["reconcile", "list", "--database-url", db.url])
            #expect(list.contains(id) && list.contains(Self.zone), "\(list)")
            try await withInProcessTracker(db) { tracker in
                let http = try await tracker.request("GET", "/v1/reports/reconciliation?import=\(id)&format=csv",
                                                      headers: ["Authorization": "Bearer \(key)"]).text
                let (_, cli) = try await runTrackerToEnd(["report", "reconciliation", "--import", id, "--output", "csv", "--database-url", db.url])
                #expect(cli == http)
                #expect(http.contains("2026-11-10,/6499/sports/top,13,12,-0.07692307692307693,4,4,0.0,true,1,0,0,0,0"), "\(http)")
                let (_, table) = try await runTrackerToEnd(["report", "reconciliation", "--database-url", db.url])
                #expect(table.contains("-7.7 %") && table.contains("import \(id)"), "\(table)")
            }
        }
    }

    @Test(arguments: [
        ("Date,Ad unit,Ad server impressions\n2026-11-10,top,1\n", "row 1: the header has no column Column.AD_SERVER_CLICKS"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-10,top,1,0\n2026-11-31,top,1,0\n", "row 3, column Date: '2026-11-31'"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-10,top,1,0\n2026-11-10,top,\"1,2\",0\n", "row 3, column Ad server impressions"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-10,\"top,1,0\n", "row 2: a quoted field is never closed"),
    ])
    func aMalformedFileIs400NamingTheRowAndColumnAndNothingIsStored(_ body: String, _ message: String) async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let r = try await post(tracker, body, key: key)
                #expect(r.status == 400)
                #expect(r.json["error"] as? String == "invalid_import")
                #expect((r.json["message"] as? String)?.contains(message) == true, "\(r.text)")
                #expect(try await db.scalar("SELECT count(*) FROM reconciliation_rows") == "0")
            }
        }
    }

    @Test func theImportNeedsAZoneCSVAndAReportKeyAndRefusesAHugeBodyBySize() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("ops", scope: .report)
            let ingest = try await db.createKey("app", scope: .ingest)
            // A process: a declared Content-Length the body does not have (the in-process client sets its own).
            try await withTracker(db) { tracker in
                #expect(try await post(tracker, Self.uiExport, key: key, tz: nil).json["message"] as? String ?? "" == "tz is required: the IANA time zone of the report's dates (Ad Manager's network time zone), e.g. America/New_York")
                #expect(try await post(tracker, Self.uiExport, key: key, tz: "Mars/Base").status == 400)
                #expect(try await post(tracker, Self.uiExport, key: key, contentType: "application/json").status == 415)
                #expect(try await post(tracker, Self.uiExport, key: ingest).status == 403)
                let claimed = try await tracker.request("POST", "/v1/reconciliations?tz=UTC", headers: [
                    "Authorization": "Bearer \(key)", "Content-Type": "text/csv", "Content-Length": String(100 * 1024 * 1024),
                ], body: Data("Date".utf8))
                #expect(claimed.status == 413, "a 100 MiB body is refused by its declared size, before it is read")
                let none = try await tracker.request("GET", "/v1/reports/reconciliation", headers: ["Authorization": "Bearer \(key)"])
                #expect(none.status == 404)
                #expect((none.json["message"] as? String)?.contains("no Ad Manager report has been imported yet") == true)
            }
        }
    }
}

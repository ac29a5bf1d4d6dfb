import Foundation
import Synchronization
import Testing
import Tracker

/// What a report says about itself when it leaves the tracker: its totals (`totals=true`,
/// `--totals`, every table), its file name and zone, the deployment's default zone
/// (`TRACKER_DEFAULT_TZ`), and a ratio without a denominator, over HTTP in process and on the
/// command line.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ReportExportTests {
    static let day0 = ReportTests.day0, day1 = ReportTests.day1
    static let clicksOnly = "/1234/clicks/native"
    static let newYork = "America/New_York"

    /// `ReportTests.traffic()` and an ad clicked without an impression: a row whose CTR has no denominator.
    static func traffic() -> [TrackingEvent] {
        ReportTests.traffic() + [Events.make(.click, ad: "c1", at: Events.at(day: 1, 10), adUnit: clicksOnly)]
    }

    /// A served database with `traffic()` projected, the tracker's environment, and a report key.
    func withTraffic(environment: [String: String] = [:], _ body: @Sendable (TestDatabase, InProcessTracker, String) async throws -> Void)
        async throws {
        try await withTestDatabase { db in
            try await db.append(Self.traffic())
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db, environment: environment) { tracker in
                try await waitUntilCaughtUp(tracker)
                try await body(db, tracker, key)
            }
        }
    }

    func get(_ tracker: InProcessTracker, _ path: String, key: String) async throws -> HTTPClient.Response {
        try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(key)"])
    }

    @Test func csvEndsWithATotalOnlyWhenAskedAndLeavesARatioWithoutADenominatorEmpty() async throws {
        try await withTraffic { _, tracker, key in
            let path = "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)&format=csv"
            let rows = """
                day,adUnit,formatId,impressions,duplicateImpressions,staleImpressions,clicks,duplicateClicks,attributedClicks,unattributedClicks,ctr,adchoicesImpressions,adchoicesClicks,videoPlays,videoEnds,givtImpressions,givtClicks
                \(Self.day0),\(ReportTests.home),10063170,2,0,0,2,1,1,1,0.5,1,0,0,0,0,0
                \(Self.day1),\(Self.clicksOnly),10063170,0,0,0,1,0,0,1,,0,0,0,0,0,0
                \(Self.day1),\(ReportTests.feed),native,1,1,0,0,0,0,0,0.0,0,0,0,0,0,0

                """
            let plain = try await get(tracker, path, key: key)
            #expect(plain.status == 200)
            #expect(plain.text == rows, "one line per row; no CTR without impressions")
            #expect(plain.headers["content-disposition"] == "attachment; filename=\"tracker-summary-\(Self.day0)-\(Self.day1)-UTC.csv\"")
            let totalled = try await get(tracker, path + "&totals=true", key: key)
            #expect(totalled.status == 200)
            #expect(totalled.text == rows + "Total,,,3,1,0,3,1,1,2,\(String(1.0 / 3)),1,0,0,0,0,0\n",
                    "counts summed, the CTR of the sums: 1 attributed click of 3 impressions")
            let json = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)", key: key)
            #expect(json.headers["content-disposition"] == nil)
            let clicked = (json.json["rows"] as? [[String: Any]])?.first { $0["adUnit"] as? String == Self.clicksOnly }
            #expect(clicked?["ctr"] as? Double == 0, "JSON keeps the protocol's 0")
            let refused = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)&totals=true", key: key)
            #expect(refused.status == 400)
            #expect((refused.json["message"] as? String)?.hasPrefix("totals=true adds a Total line to CSV only") == true, "\(refused.text)")
            let byHour = try await get(tracker, path + "&granularity=hour&tz=\(Self.newYork)", key: key)
            #expect(byHour.headers["content-disposition"]
                == "attachment; filename=\"tracker-summary-\(Self.day0)-\(Self.day1)-America_New_York-hourly.csv\"")
        }
    }

    @Test func aDeploymentsDefaultZoneIsTheZoneOfEveryReportThatNamesNone() async throws {
        try await withTraffic(environment: ["TRACKER_DEFAULT_TZ": Self.newYork]) { _, tracker, key in
            let range = "from=\(Self.day0)&to=\(Self.day1)"
            for format in ["json", "csv"] {
                let defaulted = try await get(tracker, "/v1/reports/summary?\(range)&format=\(format)", key: key)
                let asked = try await get(tracker, "/v1/reports/summary?\(range)&format=\(format)&tz=\(Self.newYork)", key: key)
                #expect(defaulted.status == 200 && defaulted.text == asked.text, "\(format): \(defaulted.text)")
            }
            let json = try await get(tracker, "/v1/reports/summary?\(range)", key: key)
            #expect(json.json["tz"] as? String == Self.newYork, "the body says which zone its days are")
            let utc = try await get(tracker, "/v1/reports/summary?\(range)&tz=UTC", key: key)
            #expect(utc.json["tz"] == nil, "an asked zone wins over the default")
            let csv = try await get(tracker, "/v1/reports/summary?\(range)&format=csv&totals=true", key: key)
            #expect(csv.headers["content-disposition"] == "attachment; filename=\"tracker-summary-\(Self.day0)-\(Self.day1)-America_New_York.csv\"")
            let settings = try await tracker.request("GET", "/dashboard/settings.json")
            #expect(settings.text == #"{"defaultTimeZone":"America/New_York"}"#)
        }
    }

    @Test func aDefaultOfUTCLeavesTheBodyOfAUTCReportExactlyAsWithoutOne() async throws {
        try await withTestDatabase { db in
            try await db.append(Self.traffic())
            let key = try await db.createKey("analyst", scope: .report)
            let path = "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)"
            let bodies = Mutex<[String]>([])
            for environment in [[:], ["TRACKER_DEFAULT_TZ": "UTC"]] {
                try await withInProcessTracker(db, environment: environment) { tracker in
                    try await waitUntilCaughtUp(tracker)
                    let body = try await get(tracker, path, key: key).text
                    #expect(body.hasPrefix("{\"from\":\"\(Self.day0)\",\"to\":\"\(Self.day1)\",\"ivtRules\":0,\"rows\":["), "\(body)")
                    bodies.withLock { $0.append(body) }
                }
            }
            let both = bodies.withLock { $0 }
            #expect(both.count == 2 && both[0] == both[1])
        }
    }

    @Test func theCommandLineTakesTheDefaultZoneSaysItOnStandardErrorAndTotalsLikeHTTP() async throws {
        try await withTraffic(environment: ["TRACKER_DEFAULT_TZ": Self.newYork]) { db, tracker, key in
            let environment = ["TRACKER_DEFAULT_TZ": Self.newYork]
            let http = try await get(tracker, "/v1/reports/summary?from=\(Self.day0)&to=\(Self.day1)&format=csv&totals=true", key: key).text
            let csv = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--output", "csv", "--totals",
                                                   "--database-url", db.url], environment: environment)
            #expect(csv.status == 0)
            #expect(csv.stdout == http, "standard output is the CSV alone, with its Total")
            #expect(csv.output.contains("summary from \(Self.day0) to \(Self.day1), local days in \(Self.newYork) (TRACKER_DEFAULT_TZ)\n"),
                    "\(csv.output)")
            let table = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--database-url", db.url],
                                                    environment: environment)
            let lines = table.stdout.split(separator: "\n")
            #expect(table.status == 0 && lines.last?.hasPrefix("Total ") == true, "\(table.stdout)")
            #expect(Set(lines.map(\.count)).count == 1, "the Total row is aligned with the rest:\n\(table.stdout)")
            let json = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--output", "json", "--totals",
                                                    "--database-url", db.url], environment: environment)
            #expect(json.status != 0 && json.output.contains("--totals adds a Total line to --output csv"), "\(json.output)")
            let wrong = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--database-url", db.url],
                                                    environment: ["TRACKER_DEFAULT_TZ": "Europe/Atlantis"])
            #expect(wrong.status != 0 && wrong.output.contains("TRACKER_DEFAULT_TZ must be an IANA time zone name"), "\(wrong.output)")
            let asked = try await runTrackerCommand(["report", "summary", "--from", Self.day0, "--to", Self.day1, "--tz", "UTC",
                                                     "--database-url", db.url], environment: ["TRACKER_DEFAULT_TZ": "Europe/Atlantis"])
            #expect(asked.status == 0, "--tz wins; the default is not read: \(asked.output)")
        }
    }

    @Test func serveRefusesToStartWithADefaultZoneThatIsNoZone() async throws {
        try await withTestDatabase { db in
            let run = try await runTrackerCommand(["serve", "--port", "0", "--database-url", db.url],
                                                  environment: ["TRACKER_DEFAULT_TZ": "Europe/Atlantis"])
            #expect(run.status != 0)
            #expect(run.output.contains("Error: TRACKER_DEFAULT_TZ must be an IANA time zone name as the tz database spells it"), "\(run.output)")
        }
    }
}

import Foundation
import Testing
@testable import Tracker
import TrackerPostgres

/// The projections against the log: any delivery gives the reports a plain reading of PROTOCOL.md 5
/// gives, incrementally and after a rebuild, through crashes and concurrent projectors.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ProjectionTests {
    /// Delivers random traffic in shuffled chunks with retries, projecting a little between
    /// chunks; the incremental projections, a rebuild and the reference must all agree.
    @Test(arguments: [(UInt64(1), 3600), (UInt64(2), 3600), (UInt64(3), 600)])
    func randomDeliveriesGiveTheReferenceReportsIncrementallyAndAfterRebuild(seed: UInt64, windowSeconds: Int) async throws {
        let window = Duration.seconds(windowSeconds)
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: seed)
            let events = RandomTraffic.events(ads: 120, using: &g)
            let projector = db.projector(batchSize: Int.random(in: 7...60, using: &g), window: window)
            for chunk in RandomTraffic.deliveries(of: events, chunks: 5, using: &g) {
                try await db.append(chunk)
                for _ in 0..<Int.random(in: 0...3, using: &g) { try await projector.step() }
            }
            try await projector.catchUp()
            let expected = ReferenceReports.csv(events, window: window)
            let incremental = try await db.reportsAsCSV()
            for (name, csv) in expected {
                #expect(incremental[name] == csv, "seed \(seed): \(name), incremental")
            }
            #expect(expected["summary includeTest=false"]!.split(separator: "\n").count > 3, "the stream produced rows")

            try await expectRebuildReproducesTheProjections(db, window: window)
            #expect(try await db.reportsAsCSV() == expected)
        }
    }

    /// The log's order is numeric on the transaction id: an event of transaction 10 comes after
    /// one of transaction 9 although "10" < "9" as text. Sorting by the text once made the
    /// projector jump past every event whose id had fewer digits, and never read them.
    @Test func projectorReadsTransactionIdsInNumericNotTextOrder() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.impression, ad: "nine", at: Events.at(1, 0, 1)),
                                 Events.make(.impression, ad: "ten", at: Events.at(1, 0, 2))])
            // Give the two rows the transaction ids 9 and 10 (both long finished), in the order
            // they were written; the trigger that keeps the log append-only is bypassed on purpose.
            try await db.pool.withConnection { c in
                try c.execute("SET session_replication_role = replica")
                try c.execute("UPDATE events SET tx = CASE request_id WHEN 'nine' THEN '9'::xid8 ELSE '10'::xid8 END")
                try c.execute("RESET session_replication_role")
            }
            let projector = db.projector(batchSize: 1)
            try await projector.catchUp()
            #expect(try await db.scalar("SELECT count(*) FROM ad_events") == "2")
            #expect(try await summaryRow(db, day: Events.day0.description)?["impressions"] == "2")
        }
    }

    @Test func retriedDeliveryChangesNoReport() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 11)
            let events = RandomTraffic.events(ads: 40, using: &g)
            try await db.append(events)
            try await db.projector().catchUp()
            let once = try await db.reportsAsCSV()
            try await db.append(events.shuffled(using: &g))
            try await db.projector().catchUp()
            #expect(try await db.reportsAsCSV() == once)
            #expect(try await db.scalar("SELECT count(*) FROM events") == String(events.count))
        }
    }

    @Test func lateImpressionCorrectsTheClickAndItsDay() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.click, ad: "late", at: Events.at(1, 0, 5))])
            try await db.projector().catchUp()
            let day = Events.day0.description
            let before = try await summaryRow(db, day: day)
            #expect(before?["clicks"] == "1")
            #expect(before?["unattributedClicks"] == "1")
            try await db.append([Events.make(.impression, ad: "late", at: Events.at(1, 0, 1))])
            try await db.projector().catchUp()
            let after = try await summaryRow(db, day: day)
            #expect(after?["impressions"] == "1")
            #expect(after?["attributedClicks"] == "1")
            #expect(after?["unattributedClicks"] == "0")
            let assets = try await Reports(pool: db.pool).run(try ReportQuery(kind: .assets, from: Events.day0, to: Events.day0))
            #expect(assets.csv == "day,adUnit,formatId,assetKey,clicks,duplicateClicks,attributedClicks,noImpression,beforeImpression,outsideWindow\n\(day),/1234/home/native,10063170,MainImage,1,0,1,0,0,0\n")
        }
    }

    /// `tracker project` killed with SIGKILL in the middle of the log, then restarted: the
    /// projections equal a rebuild, and nothing was projected twice.
    @Test func projectorKilledMidStreamResumesExactlyOnce() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 21)
            let events = RandomTraffic.events(ads: 3000, using: &g)
            try await db.append(events)
            let total = try await db.scalar("SELECT count(*) FROM events").flatMap { Int($0) } ?? 0
            let project = try runTracker(["project", "--database-url", db.url], environment: ["TRACKER_PROJECTOR_BATCH_SIZE": "200"])
            var projectedAtKill = 0
            for _ in 0..<400 {
                projectedAtKill = Int(try await db.scalar("SELECT events_projected FROM projection_state") ?? "0") ?? 0
                if projectedAtKill > 0 { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            project.signal(SIGKILL)
            _ = await project.exitStatus()
            #expect(projectedAtKill > 0)
            #expect(projectedAtKill < total, "killed before the end of the log")

            let (resumed, _) = try await runTrackerToEnd(["project", "--once", "--database-url", db.url])
            #expect(resumed == 0)
            #expect(try await db.scalar("SELECT events_projected FROM projection_state") == String(total))
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
            try await expectRebuildReproducesTheProjections(db)
        }
    }

    /// Two projectors racing over one database while events keep arriving.
    @Test func twoConcurrentProjectorsDoNotCorruptEachOther() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 31)
            let events = RandomTraffic.events(ads: 400, using: &g)
            let chunks = RandomTraffic.deliveries(of: events, chunks: 8, using: &g)
            let a = db.projector(batchSize: 50), b = db.projector(batchSize: 80)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { for chunk in chunks { try await db.append(chunk) } }
                for p in [a, b] {
                    group.addTask { for _ in 0..<60 { try await p.step(); try await Task.sleep(for: .milliseconds(3)) } }
                }
                try await group.waitForAll()
            }
            async let caughtUpA = a.catchUp()
            async let caughtUpB = b.catchUp()
            _ = try await (caughtUpA, caughtUpB)
            #expect(try await db.scalar("SELECT events_projected FROM projection_state") == String(events.count))
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
            try await expectRebuildReproducesTheProjections(db)
        }
    }

    /// A step that reads a full share from where its projector's last read ended starts reading
    /// the next window on another connection. The next step takes that window only where the
    /// checkpoint still is: here a second projector moved it in between, so the window is
    /// dropped and no event is projected twice. A window the log filled only in part is followed
    /// by the rest of the share, read by the step that takes it.
    @Test func aWindowReadAheadIsTakenOnlyFromTheCheckpoint() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 41)
            let events = RandomTraffic.events(ads: 150, using: &g)
            let (first, second) = (Array(events.prefix(events.count / 2)), Array(events.dropFirst(events.count / 2)))
            try await db.append(first)
            let share = first.count / 4
            let a = db.projector(batchSize: share), b = db.projector(batchSize: share / 4)
            func projected() async throws -> Int { Int(try await db.scalar("SELECT events_projected FROM projection_state") ?? "") ?? -1 }
            func checkpoint() async throws -> Int {
                Int(try await db.scalar("""
                    SELECT count(*) FROM events
                    WHERE (tx, seq) <= (SELECT checkpoint_tx, checkpoint_seq FROM projection_state)
                    """) ?? "") ?? -1
            }

            // Each step below waits for the window started before it to be read, as a step of a
            // projector that is behind finds it: the one that did not wait would read itself.
            try await a.step()          // a full share: the next window is being read
            await a.readAheadSettled()
            try await b.step()          // moves the checkpoint past the start of that window
            try await a.step()          // drops the window and reads from the checkpoint
            #expect(a.readAheadTally == ReadAheadTally(dropped: 1))
            #expect(try await checkpoint() == 2 * share + share / 4)
            #expect(try await projected() == 2 * share + share / 4)

            try await a.step()          // a full share from where a's last read ended: a window follows
            await a.readAheadSettled()  // it holds what is left of the first delivery, less than a share
            try await db.append(second)
            try await a.step()          // takes it, and reads the rest of its share after it
            #expect(a.readAheadTally == ReadAheadTally(taken: 1, dropped: 1))
            #expect(try await projected() == 4 * share + share / 4)
            #expect(try await checkpoint() == 4 * share + share / 4)

            while true {
                await a.readAheadSettled()
                if try await a.step() == 0 { break }
            }
            #expect(try await projected() == events.count, "each event projected once")
            let tally = a.readAheadTally
            #expect(tally.taken >= 2 && tally.dropped == 1 && tally.abandoned == 0 && tally.failed == 0, "\(tally)")
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
            try await expectRebuildReproducesTheProjections(db)
        }
    }

    /// With one connection, a window's read waits for the connection the step holds, and the
    /// next step may find it not begun (then it reads the log itself) or read: either way every
    /// event is projected once and no step waits for ever.
    @Test func aProjectorWithOneConnectionReadsItselfRatherThanWaitForItsWindow() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 43)
            let events = RandomTraffic.events(ads: 60, using: &g)
            try await db.append(events)
            let pool = ConnectionPool(conninfo: db.url, maxConnections: 1, logger: TestEnvironment.logger)
            defer { pool.close() }
            let projector = Projector(pool: pool, batchSize: events.count / 5, logger: TestEnvironment.logger)
            var steps = 0
            while try await projector.step() > 0 { steps += 1 }
            #expect(steps >= 5)
            #expect(try await db.scalar("SELECT events_projected FROM projection_state") == String(events.count))
            #expect(projector.readAheadTally.failed == 0, "\(projector.readAheadTally)")
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
        }
    }

    /// `tracker rebuild` while the server serves reports and projects new events.
    @Test func rebuildSwapsInWhileTheServerKeepsServing() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 41)
            let first = RandomTraffic.events(ads: 1500, using: &g)
            try await db.append(first)
            let key = try await db.createKey("analyst", scope: .report)
            // A process: a rebuild (another process) swaps the projections under a serving process.
            try await withTracker(db) { tracker in
                try await waitUntilCaughtUp(tracker)
                let rebuild = try runTracker(["rebuild", "--database-url", db.url])
                let late = RandomTraffic.events(ads: 200, using: &g)
                try await db.append(late)
                var statuses: [Int] = []
                while rebuild.isRunning {
                    statuses.append(try await tracker.request("GET", "/v1/reports/summary?from=2026-11-09&to=2026-11-12",
                                                               headers: ["Authorization": "Bearer \(key)"]).status)
                }
                #expect(await rebuild.exitStatus() == 0)
                #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses)")
                try await waitUntilCaughtUp(tracker)
                #expect(try await db.reportsAsCSV() == ReferenceReports.csv(first + late))
            }
        }
    }

    /// Spill files of 300 events: the log's ads spread over some twenty files, projected on
    /// every core and sent in order, give exactly the reference reports.
    @Test func aRebuildOverManySpillFilesGivesTheReferenceReports() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 43)
            let events = RandomTraffic.events(ads: 1500, using: &g)
            try await db.append(events)
            let adState = "SELECT count(*) || ' ads, ' || md5(string_agg(request_id || ':' || encode(events, 'hex'), ',' ORDER BY request_id)) FROM ad_state"
            let (status, output) = try await runTrackerToEnd(["rebuild", "--database-url", db.url],
                                                             environment: ["TRACKER_REBUILD_FILE_EVENTS": "300"])
            #expect(status == 0, "\(output)")
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
            let manyFiles = try await db.scalar(adState)
            // The same log through one spill file: every ad's packed state is the same.
            #expect(try await runTrackerToEnd(["rebuild", "--database-url", db.url]).0 == 0)
            #expect(try await db.scalar(adState) == manyFiles)
            #expect(manyFiles?.hasPrefix("0 ads") == false)
        }
    }

    @Test func rebuildPrintsItsThroughputAndCoversTheWholeLog() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 51)
            try await db.append(RandomTraffic.events(ads: 50, using: &g))
            let total = try await db.scalar("SELECT count(*) FROM events") ?? "?"
            let (status, output) = try await runTrackerToEnd(["rebuild", "--database-url", db.url])
            #expect(status == 0)
            #expect(output.contains("rebuilt projections from \(total) events"), "\(output)")
            #expect(try await db.scalar("SELECT events_projected FROM projection_state") == total)
        }
    }

    /// On a terminal (here a pseudo-terminal from script(1)) the rebuild draws a progress bar.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func rebuildOnATerminalShowsEventsDoneRateAndETA() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 71)
            try await db.append(RandomTraffic.events(ads: 300, using: &g))
            let binary = try #require(TestEnvironment.binary)
            let out = FileManager.default.temporaryDirectory.appendingPathComponent("rebuild-tty-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: out) }
            let status = try await Subprocess.run("/usr/bin/script", ["-qec", "\(binary) rebuild --database-url '\(db.url)'", "/dev/null"],
                                                  environment: trackerEnvironment([:]), outputPath: out)
            let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            #expect(status == 0, "\(output)")
            let total = try await db.scalar("SELECT count(*) FROM events") ?? "?"
            #expect(output.contains("copying    ["), "\(output)")
            #expect(output.contains("\(total)/\(total) events"), "\(output)")
            #expect(output.contains(" ev/s  ETA "), "\(output)")
            #expect(output.contains("phases: copying"), "\(output)")
        }
    }

    @Test func aSecondConcurrentRebuildStopsInsteadOfDroppingTheFirstsWork() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 61)
            let events = RandomTraffic.events(ads: 1500, using: &g)
            try await db.append(events)
            async let first = runTrackerToEnd(["rebuild", "--database-url", db.url])
            async let second = runTrackerToEnd(["rebuild", "--database-url", db.url])
            let results = try await [first, second]
            #expect(results.contains { $0.0 == 0 })
            for (status, output) in results where status != 0 {
                #expect(output.contains("another 'tracker rebuild' is running"), "\(output)")
            }
            #expect(try await db.reportsAsCSV() == ReferenceReports.csv(events))
        }
    }

    /// After retention the log no longer holds the dropped days: a rebuild would empty their rows.
    @Test func rebuildRefusesToForgetDaysRetentionDroppedUnlessTold() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.impression, ad: "kept", at: Events.at(1, 0))])
            try await db.projector().catchUp()
            _ = try await db.rows("""
                INSERT INTO retention_runs (day, partition_name, events, ids_forgotten, keep_days, checkpoint_tx)
                VALUES ('2026-10-01', 'events_20261001', 10, 10, 30, '1')
                """)
            let before = try await db.reportsAsCSV()
            let (refused, message) = try await runTrackerToEnd(["rebuild", "--database-url", db.url])
            #expect(refused != 0)
            #expect(message.contains("retention dropped 1 day(s) of the log (2026-10-01 to 2026-10-01)"), "\(message)")
            #expect(message.contains("--discard-dropped-days"))
            #expect(try await db.reportsAsCSV() == before)
            let (status, output) = try await runTrackerToEnd(["rebuild", "--discard-dropped-days", "--database-url", db.url])
            #expect(status == 0, "\(output)")
        }
    }

    /// Projections computed with one attribution window are never extended with another.
    @Test func aChangedAttributionWindowNeedsARebuild() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.impression, ad: "w", at: Events.at(1, 0)),
                                 Events.make(.click, ad: "w", at: Events.at(1, 0, 45 * 60))])
            try await db.projector().catchUp()
            var (status, output) = try await runTrackerToEnd(["project", "--once", "--database-url", db.url],
                                                       environment: ["TRACKER_ATTRIBUTION_WINDOW": "1800"])
            #expect(status != 0)
            #expect(output.contains("tracker rebuild"), "\(output)")
            (status, output) = try await runTrackerToEnd(["rebuild", "--database-url", db.url],
                                                   environment: ["TRACKER_ATTRIBUTION_WINDOW": "1800"])
            #expect(status == 0, "\(output)")
            let row = try await summaryRow(db, day: Events.day0.description)
            #expect(row?["attributedClicks"] == "0")
            #expect(row?["unattributedClicks"] == "1")
            (status, output) = try await runTrackerToEnd(["project", "--once", "--database-url", db.url],
                                                   environment: ["TRACKER_ATTRIBUTION_WINDOW": "1800"])
            #expect(status == 0, "\(output)")
        }
    }
}

/// Rebuilds the projections from the log and checks they equal the current ones row for row.
func expectRebuildReproducesTheProjections(_ db: TestDatabase, window: Duration = .seconds(3600),
                                           sourceLocation: SourceLocation = #_sourceLocation) async throws {
    let incremental = try await db.projectionSnapshot()
    try await Rebuild(pool: db.pool, attributionWindow: window, logger: TestEnvironment.logger).run()
    try await db.projector(window: window).catchUp()  // what the rebuild's horizon left to the live projector
    let rebuilt = try await db.projectionSnapshot()
    for (table, rows) in incremental {
        #expect(rebuilt[table] == rows, "\(table) after rebuild", sourceLocation: sourceLocation)
    }
}

/// The summary row of `day` for the default ad unit and format, as column → value.
func summaryRow(_ db: TestDatabase, day: String) async throws -> [String: String]? {
    let d = try #require(Day(iso: day))
    let csv = try await Reports(pool: db.pool).run(try ReportQuery(kind: .summary, from: d, to: d)).csv
    let lines = csv.split(separator: "\n").map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }
    guard lines.count > 1 else { return nil }
    return Dictionary(uniqueKeysWithValues: zip(lines[0], lines[1]))
}

/// The environment the tracker binary runs with in tests: quiet logs, no database inherited
/// from the shell (each test names its own), plus `extra`.
func trackerEnvironment(_ extra: [String: String]) -> [String: String] {
    var env = ProcessInfo.processInfo.environment
    env["DATABASE_URL"] = nil
    env["REPORT_DATABASE_URL"] = nil
    env["TRACKER_DEFAULT_TZ"] = nil
    env["TRACKER_LOG_LEVEL"] = "warning"
    for (k, v) in extra { env[k] = v }
    return env
}

/// Starts the tracker binary with `arguments`, its output discarded.
func runTracker(_ arguments: [String], environment: [String: String] = [:]) throws -> Subprocess {
    try Subprocess(try #require(TestEnvironment.binary), arguments, environment: trackerEnvironment(environment))
}

/// Runs the tracker binary to its end; returns the exit status and stdout + stderr.
func runTrackerToEnd(_ arguments: [String], environment: [String: String] = [:]) async throws -> (Int32, String) {
    let run = try await runTrackerCommand(arguments, environment: environment)
    return (run.status, run.output)
}

/// Runs the tracker binary to its end: the exit status, stdout alone, and stdout + stderr.
func runTrackerCommand(_ arguments: [String], environment: [String: String] = [:]) async throws
    -> (status: Int32, stdout: String, output: String) {
    let binary = try #require(TestEnvironment.binary)
    let files = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-run-\(UUID().uuidString)").path
    defer { for f in [files + ".out", files + ".err"] { try? FileManager.default.removeItem(atPath: f) } }
    var env = trackerEnvironment(environment)
    env["TRACKER_STDERR"] = files + ".err"
    // The shell only separates stderr from stdout (Subprocess joins them).
    let status = try await Subprocess.run("/bin/sh", ["-c", "exec \"$@\" 2>\"$TRACKER_STDERR\"", "sh", binary] + arguments,
                                          environment: env, outputPath: files + ".out")
    let stdout = (try? String(contentsOfFile: files + ".out", encoding: .utf8)) ?? ""
    let stderr = (try? String(contentsOfFile: files + ".err", encoding: .utf8)) ?? ""
    return (status, stdout, stdout + stderr)
}

/// Polls /readyz until the projections have caught up with the log.
func waitUntilCaughtUp(_ tracker: some TrackerHTTP) async throws {
    let caughtUp = try await eventually(within: .seconds(60)) { () -> Bool? in
        let lag = try await tracker.request("GET", "/readyz").json["projectionLag"] as? [String: Any]
        return lag?["events"] as? Int == 0 ? true : nil
    }
    #expect(caughtUp == true, "the projector did not catch up within 60 s")
}

import Foundation
import Testing
@testable import Tracker

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct LogTests {
    @Test func loggedEventsCannotBeUpdatedDeletedOrTruncated() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                _ = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
            }
            let partition = try #require(try await db.scalar("SELECT tableoid::regclass::text FROM events LIMIT 1"))
            for statement in ["UPDATE events SET request_id = 'x'", "DELETE FROM events", "TRUNCATE events",
                              "TRUNCATE \(partition)", "DELETE FROM event_ids", "TRUNCATE event_ids"] {
                await #expect(throws: DatabaseError.self, "\(statement)") { try await db.pool.withConnection { try $0.execute(statement) } }
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "1")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids") == "1")
        }
    }

    @Test func acknowledgedEventsSurviveKillNineOfTheServer() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: kill -9 of the process.
            let tracker = try await TrackerProcess(databaseURL: db.url)
            var acknowledged = 0
            for _ in 0..<20 {
                let r = try await tracker.postEvents(Wire.batch((0..<10).map { _ in Wire.event() }), key: key)
                if r.status == 200 { acknowledged += r.json["accepted"] as? Int ?? 0 }
            }
            await tracker.kill9()
            #expect(acknowledged == 200)
            #expect(try await db.scalar("SELECT count(*) FROM events") == "\(acknowledged)")
        }
    }

    @Test func migrationsRunTwiceAndConcurrentlyApplyOnce() async throws {
        try await withTestDatabase { db in
            let binary = try #require(TestEnvironment.binary)
            let runs = try (0..<3).map { _ in try Subprocess(binary, ["migrate", "--database-url", db.url]) }
            var statuses: [Int32] = []
            for p in runs { statuses.append(await p.exitStatus()) }
            #expect(statuses == [0, 0, 0])
            #expect(try await db.scalar("SELECT count(*) FROM schema_migrations") == String(Migration.all.count))
        }
    }

    @Test func sigtermDrainsAndExitsCleanly() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: SIGTERM to the process.
            let tracker = try await TrackerProcess(databaseURL: db.url)
            #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
            #expect(await tracker.terminate() == 0)
        }
    }

    @Test func sigtermFinishesTheBatchInFlightCommitsItAndExits() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: SIGTERM to the process in the middle of a batch.
            let tracker = try await TrackerProcess(databaseURL: db.url)
            let body = Wire.batch((0..<3).map { _ in Wire.event() })
            let inFlight = try tracker.client.startRequest(
                "POST", "/v1/events", headers: ["Authorization": "Bearer \(key)", "Content-Type": "application/json"],
                bodyPrefix: body.prefix(20), declaredLength: body.count)
            try await Task.sleep(for: .milliseconds(200))
            tracker.process.signal(SIGTERM)
            try await Task.sleep(for: .milliseconds(300))
            // The server drains: the request it had begun is still served and committed.
            let response = try await onThreadOfItsOwn { try tracker.client.finishRequest(inFlight, rest: body.dropFirst(20)) }
            #expect(response.status == 200)
            #expect(response.json["accepted"] as? Int == 3)
            #expect(await tracker.process.exitStatus() == 0)
            #expect(try await db.scalar("SELECT count(*) FROM events") == "3")
        }
    }

    @Test func readyzReportsDatabaseAndMigrations() async throws {
        try await withTestDatabase { db in
            try await withInProcessTracker(db) { tracker in
                let r = try await tracker.request("GET", "/readyz")
                #expect(r.status == 200)
                #expect(r.json["migrations"] as? String == "current")
            }
        }
    }

    /// A group is written with a plain append until it meets a stored id, then with the
    /// conflict-checking statement (`AppendStrategy`): whichever writes it, a retried id is a
    /// duplicate and the new ids beside it are stored, once.
    @Test func aGroupWithAStoredIdStoresItsNewIdsOnceWhicheverStatementWritesIt() async throws {
        try await withTestDatabase { db in
            let log = EventLog(pool: db.pool, logger: TestEnvironment.logger)
            func events(_ n: Int) -> [TrackingEvent] { (0..<n).map { _ in Events.make(.impression, ad: "ad-\(UUID())", at: Events.at(9)) } }
            let first = events(3), second = events(2), third = events(1), fourth = events(2)
            let outcomes = try await withThrowingTaskGroup(of: [AppendOutcome].self) { group in
                group.addTask { try await log.run(); return [] }
                defer { log.stop() }
                var outcomes: [AppendOutcome] = []
                var checked: [Bool] = []
                for events in [first, [first[1]] + second, [first[0], second[0]] + third, fourth] {
                    checked.append(log.checksConflictsNext)
                    outcomes.append(try await log.append(events, keyName: "tests"))
                }
                // Only the second group's plain append met a stored id: the later ones were
                // written with the conflict-checking statement at once.
                #expect(checked == [false, false, true, true])
                return outcomes
            }
            #expect(outcomes == [AppendOutcome(stored: 3, duplicates: 0),   // plain append
                                 AppendOutcome(stored: 2, duplicates: 1),   // plain append fails, written again
                                 AppendOutcome(stored: 1, duplicates: 2),   // conflict-checking statement at once
                                 AppendOutcome(stored: 2, duplicates: 0)])
            #expect(try await db.scalar("SELECT count(*) || ' ' || count(DISTINCT id) FROM events") == "8 8")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids") == "8")
        }
    }
}

/// A cluster of its own, so stopping it disturbs no other test.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct DatabaseOutageTests {
    @Test func databaseDownGives503WithRetryAfterAndIngestionResumesWhenItIsBack() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-outage-\(UUID().uuidString)").path
        let port = freeLoopbackPort()
        try await TestEnvironment.postgres("start", dir: dir, port: port)
        do {
            try await outage(dir: dir, port: port)
        } catch {
            try? await TestEnvironment.postgres("stop", dir: dir, port: port)
            try? FileManager.default.removeItem(atPath: dir)
            throw error
        }
        try await TestEnvironment.postgres("stop", dir: dir, port: port)
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// A database that turns read-only (a failed-over primary, a standby behind the same name)
    /// gets 503 with Retry-After, not 500; the read-only connections are replaced, so ingestion
    /// resumes by itself once the database takes writes again.
    @Test func aReadOnlyDatabaseGets503AndIngestionResumesWhenItTakesWritesAgain() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
                // New sessions start read-only; the tracker's sessions are ended so it reconnects.
                func setReadOnly(_ on: Bool, endSessions: Bool) async throws {
                    try await db.pool.withConnection { c in
                        try c.execute("ALTER DATABASE \(db.name) SET default_transaction_read_only = \(on ? "on" : "off")")
                        if endSessions {
                            _ = try c.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                        }
                    }
                }
                try await setReadOnly(true, endSessions: true)
                let refused = try await eventually(within: .seconds(10)) { () -> HTTPClient.Response? in
                    let r = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                    return r.status == 503 && r.json["error"] as? String == "database_unavailable" ? r : nil
                }
                #expect(refused?.headers["retry-after"] != nil, "503 with Retry-After while the database is read-only")
                // Concurrent batches make the tracker reopen every pooled session, all read-only now.
                for _ in 0..<3 {
                    try await withThrowingTaskGroup(of: Int.self) { group in
                        for _ in 0..<16 { group.addTask { try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status } }
                        for try await status in group { #expect(status == 503) }
                    }
                }
                // The tracker's sessions stay open and read-only: only replacing them helps.
                try await setReadOnly(false, endSessions: false)
                let resumed = try await eventually(within: .seconds(10)) { () -> Int? in
                    let status = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status
                    return status == 200 ? status : nil
                }
                #expect(resumed == 200)
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "2", "the acknowledged events, nothing of the refused ones")
        }
    }

    private func outage(dir: String, port: Int) async throws {
        let db = try await TestDatabase(adminURL: "postgresql://postgres@127.0.0.1:\(port)/postgres")
        let key = try await db.createKey("app", scope: .ingest)
        try await withInProcessTracker(db) { tracker in
            // Warm the key cache, then take the database away.
            #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
            try await TestEnvironment.postgres("stop", dir: dir, port: port)
            let down = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
            #expect(down.status == 503)
            #expect(Int(down.headers["retry-after"] ?? "") != nil)
            #expect(down.json["error"] as? String == "database_unavailable")
            #expect(try await tracker.request("GET", "/readyz").status == 503)
            try await TestEnvironment.postgres("start", dir: dir, port: port)
            var recovered = false
            for _ in 0..<100 {
                if try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200 { recovered = true; break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(recovered)
        }
        // Exactly the two acknowledged events: nothing of the refused batch was stored.
        #expect(try await db.scalar("SELECT count(*) FROM events") == "2")
        await db.drop()
    }
}

import Foundation
import Testing
import Tracker

/// A database that is locked, frozen or configured for asynchronous commit must not hang
/// requests or turn a 200 into a lie (issue 12).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct DatabaseDeadlineTests {
    /// `event_ids` locked by another session: the batch gets 503 with Retry-After within the
    /// append's deadline (PostgreSQL's lock_timeout cancels the write), nothing of it is stored,
    /// and ingestion resumes when the lock goes. Before, the request waited for the lock.
    @Test func aLockedLogGets503WithinTheDeadlineAndNothingIsStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db, environment: ["TRACKER_APPEND_TIMEOUT": "4"]) { tracker in
                #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
                let locker = try Connection.open(db.url)
                defer { locker.close() }
                try locker.execute("BEGIN; LOCK TABLE event_ids IN ACCESS EXCLUSIVE MODE")
                let started = ContinuousClock.now
                let locked = try await tracker.postEvents(Wire.batch((0..<5).map { _ in Wire.event() }), key: key)
                let waited = ContinuousClock.now - started
                #expect(locked.status == 503, "\(locked.status) \(locked.text)")
                #expect(locked.headers["retry-after"] != nil)
                #expect(waited < .seconds(6), "answered after \(waited)")
                try locker.execute("ROLLBACK")
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await db.scalar("SELECT count(*) FROM events") == "1", "nothing of the refused batch")
                #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
            }
        }
    }

    /// With `synchronous_commit = off` as the database's default and a 10 s WAL writer delay, an
    /// acknowledged event must survive PostgreSQL crashing the moment the 200 arrives: the log's
    /// connections set synchronous_commit = on themselves. Before, every such event was lost.
    @Test func aTwoHundredSurvivesACrashWhenTheDatabaseDefaultsToAsynchronousCommit() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-async-\(UUID().uuidString)").path
        let port = freeLoopbackPort()
        try await TestEnvironment.postgres("start", dir: dir, port: port)
        let db = try await TestDatabase(adminURL: "postgresql://postgres@127.0.0.1:\(port)/postgres")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let key = try await db.createKey("app", scope: .ingest)
            try await db.pool.withConnection { c in
                try c.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
                _ = try c.query("SELECT pg_reload_conf()")
                try c.execute("ALTER DATABASE \(db.name) SET synchronous_commit = off")
            }
            var acknowledged = 0
            // A process: the tracker's own connections see PostgreSQL crash and come back, as a deployed process's do.
            try await withTracker(db) { tracker in
                for _ in 0..<2 {
                    let r = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                    #expect(r.status == 200)
                    if r.status == 200 { acknowledged += 1 }
                    try await crashPostgres(dir: dir)
                    try await TestEnvironment.postgres("start", dir: dir, port: port)
                    _ = try await eventually(within: .seconds(10)) { () -> Int? in
                        let status = try await tracker.request("GET", "/readyz").status
                        return status == 200 ? status : nil
                    }
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == String(acknowledged), "every acknowledged event survived the crash")
        } catch {
            await db.drop()
            try? await TestEnvironment.postgres("stop", dir: dir, port: port)
            throw error
        }
        await db.drop()
        try await TestEnvironment.postgres("stop", dir: dir, port: port)
    }

    /// SIGQUIT to the postmaster: an immediate shutdown, no checkpoint, what is not flushed is lost.
    private func crashPostgres(dir: String) async throws {
        let pidFile = try String(contentsOfFile: dir + "/data/postmaster.pid", encoding: .utf8)
        let pid = try #require(pidFile.split(separator: "\n").first.flatMap { pid_t($0) })
        kill(pid, SIGQUIT)
        let deadline = ContinuousClock.now + .seconds(20)
        while kill(pid, 0) == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
    }
}

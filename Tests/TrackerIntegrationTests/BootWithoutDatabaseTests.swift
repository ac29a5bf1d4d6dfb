import Foundation
import Testing
import Tracker

/// The tracker and the database coming and going in the wrong order, on a cluster of its own.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct BootWithoutDatabaseTests {
    /// Started while PostgreSQL is down, the tracker listens, says 503 (with Retry-After) to
    /// /readyz and to ingestion, and takes writes and projects them once PostgreSQL is up, without
    /// a restart. Before, the projector's first window check threw at boot and the process
    /// stayed up without ever listening.
    @Test func aTrackerStartedWhileTheDatabaseIsDownServesOnceItComesUp() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-boot-\(UUID().uuidString)").path
        let port = freeLoopbackPort()
        try await TestEnvironment.postgres("start", dir: dir, port: port)
        let db = try await TestDatabase(adminURL: "postgresql://postgres@127.0.0.1:\(port)/postgres")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let key = try await db.createKey("app", scope: .ingest)
            try await TestEnvironment.postgres("stop", dir: dir, port: port)
            // A process: the process starts while its database is down.
            let tracker = try await TrackerProcess(databaseURL: db.url)
            do {
                let down = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(down.status == 503)
                #expect(down.headers["retry-after"] != nil)
                let ready = try await tracker.request("GET", "/readyz")
                #expect(ready.status == 503)
                #expect(ready.headers["retry-after"] != nil)
                try await TestEnvironment.postgres("start", dir: dir, port: port)
                let accepted = try await eventually(within: .seconds(20)) { () -> Int? in
                    let r = try await tracker.postEvents(Wire.batch([Wire.event(requestId: "boot-ad")]), key: key)
                    return r.status == 200 ? r.json["accepted"] as? Int : nil
                }
                #expect(accepted == 1)
                let projected = try await eventually(within: .seconds(20)) { () -> String? in
                    let n = try await db.scalar("SELECT events_projected FROM projection_state")
                    return n == "1" ? n : nil
                }
                #expect(projected == "1", "the projector started once the database came up")
            } catch {
                await tracker.kill9()
                throw error
            }
            await tracker.kill9()
        } catch {
            try? await TestEnvironment.postgres("start", dir: dir, port: port)
            await db.drop()
            try? await TestEnvironment.postgres("stop", dir: dir, port: port)
            throw error
        }
        await db.drop()
        try await TestEnvironment.postgres("stop", dir: dir, port: port)
    }
}

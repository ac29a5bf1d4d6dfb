import Foundation
import Testing
import Tracker

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ProjectorStopTests {
    /// A log row of a type this binary does not know (written by a newer version during a rolling
    /// upgrade) stops the projector at that row: its checkpoint stays before it, the error names
    /// the row, and /readyz says so while ingestion goes on. Skipping it would drop the event
    /// from every report without a trace.
    @Test func aLogRowTheProjectorCannotReadStopsItAndReadyzSaysSo() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await db.pool.withConnection { try $0.execute("ALTER TYPE event_type ADD VALUE 'future_kind'") }
            try await withInProcessTracker(db) { tracker in
                #expect(try await tracker.postEvents(Wire.batch([Wire.event(requestId: "before")]), key: key).status == 200)
                // Generous: the projector sees an event only once every transaction older than
                // its commit has ended, in any database of the cluster, and other suites hold
                // transactions open for tens of seconds on purpose (locked-log tests).
                let first = try await eventually(within: .seconds(120)) { () -> String? in
                    let n = try await db.scalar("SELECT events_projected FROM projection_state")
                    return n == "1" ? n : nil
                }
                #expect(first == "1")
                try await db.pool.withConnection { c in
                    _ = try c.query("""
                        INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test, received_at, corrected_at, occurred_at, key_name)
                        VALUES (gen_random_uuid(), 'future_kind', 'from-the-future', '/1234/a', 'native', 'app', false, false, false, now(), now(), now(), 'app')
                        """)
                }
                #expect(try await tracker.postEvents(Wire.batch([Wire.event(requestId: "after")]), key: key).status == 200)
                let ready = try await eventually(within: .seconds(120)) { () -> HTTPClient.Response? in
                    let r = try await tracker.request("GET", "/readyz")
                    return r.json["projector"] as? String == "stopped" ? r : nil
                }
                #expect(ready?.status == 200, "ingestion goes on: the node stays in the balancer")
                let message = ready?.json["projectorError"] as? String ?? ""
                #expect(message.contains("type"), "names what it could not read: \(message)")
                #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await db.scalar("SELECT events_projected FROM projection_state") == "1", "the checkpoint stays before the row")
            }
        }
    }
}

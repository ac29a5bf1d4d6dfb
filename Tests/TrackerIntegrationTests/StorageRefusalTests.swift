import Foundation
import Testing
import Tracker

/// What the validator accepts, the log stores; what the database refuses costs one event, not
/// its batch (issue 12).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct StorageRefusalTests {
    /// `1e-20000` read as the double 0.0 and passed; jsonb refused it, and the batch got 500 on
    /// every retry with the valid event beside it never stored.
    @Test func aNumberJsonbCannotStoreIsRejectedAndTheRestOfTheBatchIsStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let valid = Wire.event()
                let body = Data(#"{"events":[{"id":"\#(UUID().uuidString.lowercased())","type":"impression","requestId":"r","adUnit":"/1/a","formatId":"1","occurredAt":"\#(Wire.isoNow(offsetSeconds: -1))","attributes":{"x":1e-20000}},"#.utf8)
                    + Wire.batch([valid]).dropFirst(#"{"events":["#.utf8.count)
                let r = try await tracker.postEvents(body, key: key)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.json["accepted"] as? Int == 1)
                let rejected = r.json["rejected"] as? [[String: Any]] ?? []
                #expect(rejected.count == 1 && rejected.first?["index"] as? Int == 0)
                let error = rejected.first?["error"] as? String
                #expect(error?.contains("attributes.x is a number the log cannot store") == true, "\(String(describing: error))")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "1")
        }
    }

    /// Whatever else the database refuses for an event's content (here a constraint the validator
    /// does not know) is a rejection of that event naming the rule; the others are stored.
    @Test func anEventTheDatabaseRefusesIsRejectedAloneAndTheOthersAreStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await db.pool.withConnection {
                try $0.execute("ALTER TABLE events ADD CONSTRAINT refuse_marked CHECK (request_id <> 'refused-by-the-database')")
            }
            try await withInProcessTracker(db) { tracker in
                let events = (0..<7).map { i in Wire.event(requestId: i == 4 ? "refused-by-the-database" : "ad-\(i)") }
                let r = try await tracker.postEvents(Wire.batch(events), key: key)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.json["accepted"] as? Int == 6)
                #expect(r.json["duplicates"] as? Int == 0)
                let rejected = r.json["rejected"] as? [[String: Any]] ?? []
                #expect(rejected.count == 1)
                #expect(rejected.first?["index"] as? Int == 4)
                #expect(rejected.first?["id"] as? String == events[4]["id"] as? String)
                let error = rejected.first?["error"] as? String
                #expect(error?.contains("SQLSTATE 23514") == true, "\(String(describing: error))")
                // The retry is the same answer: the six are duplicates now, the refused one is refused again.
                let again = try await tracker.postEvents(Wire.batch(events), key: key)
                #expect(again.status == 200)
                #expect(again.json["duplicates"] as? Int == 6)
                #expect((again.json["rejected"] as? [Any])?.count == 1)
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "6")
        }
    }
}

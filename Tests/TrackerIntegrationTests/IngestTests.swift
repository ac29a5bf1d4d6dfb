import Foundation
import Testing
import Tracker

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct IngestTests {
    @Test func acceptedEventsAreStoredWithEveryField() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app-1", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let id = UUID().uuidString.lowercased()
                let event = Wire.event(id: id, type: "click", requestId: "req-7f3c", assetKey: "MainImage", extra: [
                    "clickAction": "custom_handler", "source": "mediation", "adapter": "ExampleNetwork",
                    "eea": true, "reservation": true, "attributes": ["appVersion": "4.2.0", "build": 42, "beta": false],
                ])
                let r = try await tracker.postEvents(Wire.batch([event]), key: key)
                #expect(r.status == 200)
                #expect(r.json["accepted"] as? Int == 1)
                #expect(r.json["duplicates"] as? Int == 0)
                let row = try await db.rows("""
                    SELECT type, request_id, asset_key, click_action, source, adapter, eea, reservation, test,
                           attributes->>'appVersion', attributes->>'build', key_name, received_at IS NOT NULL,
                           corrected_at <= received_at
                    FROM events WHERE id = $1
                    """, [id])
                #expect(row.first == ["click", "req-7f3c", "MainImage", "custom_handler", "mediation", "ExampleNetwork",
                                      "t", "t", "f", "4.2.0", "42", "app-1", "t", "t"])
            }
        }
    }

    @Test func retriedBatchIsStoredOnceAndCountedAsDuplicates() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let body = Wire.batch((0..<5).map { _ in Wire.event() })
                let first = try await tracker.postEvents(body, key: key)
                let retry = try await tracker.postEvents(body, key: key)
                #expect(first.json["accepted"] as? Int == 5)
                #expect(retry.json["accepted"] as? Int == 0)
                #expect(retry.json["duplicates"] as? Int == 5)
                #expect(try await db.scalar("SELECT count(*) FROM events") == "5")
            }
        }
    }

    @Test func sameIdTwiceInOneBatchIsOneEventAndOneDuplicate() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let id = UUID().uuidString.lowercased()
                let r = try await tracker.postEvents(Wire.batch([Wire.event(id: id), Wire.event(id: id), Wire.event()]), key: key)
                #expect(r.json["accepted"] as? Int == 2)
                #expect(r.json["duplicates"] as? Int == 1)
                #expect(try await db.scalar("SELECT count(*) FROM events WHERE id = $1", [id]) == "1")
            }
        }
    }

    @Test func sixteenConcurrentIdenticalRequestsStoreEachEventOnce() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let body = Wire.batch((0..<50).map { _ in Wire.event() })
                let client = tracker
                let responses = try await withThrowingTaskGroup(of: HTTPClient.Response.self) { group in
                    for _ in 0..<16 { group.addTask { try await client.postEvents(body, key: key) } }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(responses.allSatisfy { $0.status == 200 })
                let accepted = responses.compactMap { $0.json["accepted"] as? Int }.reduce(0, +)
                let duplicates = responses.compactMap { $0.json["duplicates"] as? Int }.reduce(0, +)
                #expect(accepted == 50)
                #expect(duplicates == 15 * 50)
                #expect(try await db.scalar("SELECT count(*) FROM events") == "50")
            }
        }
    }

    @Test func invalidEventsAreListedAndValidOnesAroundThemStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let badId = UUID().uuidString.lowercased()
                let events = [Wire.event(), Wire.event(id: badId, type: "click"), Wire.event()]
                let r = try await tracker.postEvents(Wire.batch(events), key: key)
                #expect(r.status == 200)
                #expect(r.json["accepted"] as? Int == 2)
                let rejected = try #require(r.json["rejected"] as? [[String: Any]])
                #expect(rejected.count == 1)
                #expect(rejected.first?["index"] as? Int == 1)
                #expect(rejected.first?["id"] as? String == badId)
                #expect((rejected.first?["error"] as? String)?.contains("assetKey") == true)
                #expect(try await db.scalar("SELECT count(*) FROM events") == "2")
            }
        }
    }

    @Test func gzipBodyIsAccepted() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let body = try await gzipped(Wire.batch((0..<3).map { _ in Wire.event() }))
                let r = try await tracker.postEvents(body, key: key, headers: ["Content-Encoding": "gzip"])
                #expect(r.status == 200)
                #expect(r.json["accepted"] as? Int == 3)
                let corrupt = try await tracker.postEvents(Data("not gzip".utf8), key: key, headers: ["Content-Encoding": "gzip"])
                #expect(corrupt.status == 400)
            }
        }
    }

    @Test func everyErrorStatusHasAJSONBodyWithCodeAndMessage() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let c = tracker
                let ok = Wire.batch([Wire.event()])
                let cases: [(String, HTTPClient.Response, Int)] = [
                    ("no key", try await c.request("POST", "/v1/events", headers: ["Content-Type": "application/json"], body: ok), 401),
                    ("unknown key", try await c.postEvents(ok, key: "trk_unknown"), 401),
                    ("report key", try await c.postEvents(ok, key: report), 403),
                    ("text/plain", try await c.request("POST", "/v1/events", headers: ["Authorization": "Bearer \(ingest)", "Content-Type": "text/plain"], body: ok), 415),
                    ("brotli", try await c.postEvents(ok, key: ingest, headers: ["Content-Encoding": "br"]), 415),
                    ("not JSON", try await c.postEvents(Data("{nope".utf8), key: ingest), 400),
                    ("no events array", try await c.postEvents(Data("{\"evts\":[]}".utf8), key: ingest), 400),
                    ("501 events", try await c.postEvents(Wire.batch((0..<501).map { _ in Wire.event() }), key: ingest), 413),
                    ("600 KiB body", try await c.postEvents(Data(repeating: 0x20, count: 600 * 1024), key: ingest), 413),
                    ("unknown route", try await c.request("GET", "/v1/nothing"), 404),
                ]
                for (name, response, status) in cases {
                    #expect(response.status == status, "\(name)")
                    #expect(response.json["error"] is String, "\(name): \(response.text)")
                    #expect((response.json["message"] as? String)?.isEmpty == false, "\(name)")
                }
                #expect(try await db.scalar("SELECT count(*) FROM events") == "0")
            }
        }
    }

    /// Each step's margin is a second or more of debt, so a slow machine does not change the answers.
    @Test func keyOverItsRateLimitGets429WithRetryAfterAndNothingStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db, environment: ["TRACKER_RATE_LIMIT": "10"]) { tracker in
                // A batch bigger than a second of the limit goes through a full bucket and
                // leaves the key 20 events in debt: 2 s.
                let big = try await tracker.postEvents(Wire.batch((0..<30).map { _ in Wire.event() }), key: key)
                #expect(big.status == 200)
                let refusedID = UUID().uuidString.lowercased()
                let tooMany = try await tracker.postEvents(Wire.batch([Wire.event(id: refusedID)]), key: key)
                #expect(tooMany.status == 429)
                #expect(tooMany.json["error"] as? String == "rate_limited")
                let wait = Int(tooMany.headers["retry-after"] ?? "") ?? 0
                #expect((2...3).contains(wait), "21 events short at 10/s: \(tooMany.headers)")
                try await Task.sleep(for: .seconds(wait))
                #expect(try await tracker.postEvents(Wire.batch([Wire.event(id: refusedID)]), key: key).status == 200,
                        "the retry after Retry-After succeeds")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "31")
        }
    }

    /// A batch is charged for every event it carries, valid or not, gzip or not; a batch refused
    /// whole gets its charge back, so its corrected retry is not refused too.
    @Test func rateLimitChargesEveryEventSentAndRefundsBatchesRefusedWhole() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db, environment: ["TRACKER_RATE_LIMIT": "10"]) { tracker in
                // 200 events, but sentAt is a number: refused whole (400). Kept, its charge
                // would leave 19 s of debt.
                let badSentAt = try JSONSerialization.data(withJSONObject: ["events": (0..<200).map { _ in Wire.event() }, "sentAt": 5])
                #expect(try await tracker.postEvents(badSentAt, key: key).status == 400)
                let corrected = try await tracker.postEvents(Wire.batch((0..<5).map { _ in Wire.event() }), key: key)
                #expect(corrected.status == 200, "the refused batch's charge was given back: \(corrected.text)")

                // Invalid events count too: 40 events of which 38 are rejected leave about 3 s
                // of debt (charging the 2 valid ones only would leave 3 events).
                try await Task.sleep(for: .seconds(1))
                let mixed = Wire.batch((0..<40).map { i in i < 2 ? Wire.event() : Wire.event(type: "nonsense") })
                let partly = try await tracker.postEvents(mixed, key: key)
                #expect(partly.status == 200 && (partly.json["accepted"] as? Int) == 2, "\(partly.text)")
                let after = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(after.status == 429, "the 38 rejected events were charged too: \(after.text)")

                // A gzipped batch is charged for the events it carries once inflated: 40 of them.
                let zipped = try await gzipped(Wire.batch((0..<40).map { _ in Wire.event() }))
                try await Task.sleep(for: .seconds(Int(after.headers["retry-after"] ?? "") ?? 4))
                try await Task.sleep(for: .seconds(1))
                #expect(try await tracker.postEvents(zipped, key: key, headers: ["Content-Encoding": "gzip"]).status == 200)
                let afterZipped = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(afterZipped.status == 429, "40 gzipped events leave 3 s of debt: \(afterZipped.text)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "47")
        }
    }

    @Test func revokedKeyStopsWorking() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await APIKeys(pool: db.pool).revoke(name: "app")
            try await withInProcessTracker(db) { tracker in
                let response = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(response.status == 401)
            }
        }
    }
}

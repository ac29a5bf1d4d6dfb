import Foundation
import Testing
import Tracker

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct IngestTests {
    @Test func acceptedEventsAreStoredWithEveryField() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app-1", scope: .ingest)
            try await withTracker(db) { tracker in
                let id = UUID().uuidString.lowercased()
                let event = Wire.event(id: id, type: "click", requestId: "req-7f3c", assetKey: "MainImage", extra: [
                    "clickAction": "custom_handler", "source": "mediation", "adapter": "ExampleNetwork",
                    "eea": true, "reservation": true, "attributes": ["appVersion": "4.2.0", "build": 42, "beta": false],
                ])
                let r = try tracker.client.postEvents(Wire.batch([event]), key: key)
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
            try await withTracker(db) { tracker in
                let body = Wire.batch((0..<5).map { _ in Wire.event() })
                let first = try tracker.client.postEvents(body, key: key)
                let retry = try tracker.client.postEvents(body, key: key)
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
            try await withTracker(db) { tracker in
                let id = UUID().uuidString.lowercased()
                let r = try tracker.client.postEvents(Wire.batch([Wire.event(id: id), Wire.event(id: id), Wire.event()]), key: key)
                #expect(r.json["accepted"] as? Int == 2)
                #expect(r.json["duplicates"] as? Int == 1)
                #expect(try await db.scalar("SELECT count(*) FROM events WHERE id = $1", [id]) == "1")
            }
        }
    }

    @Test func sixteenConcurrentIdenticalRequestsStoreEachEventOnce() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withTracker(db) { tracker in
                let body = Wire.batch((0..<50).map { _ in Wire.event() })
                let client = tracker.client
                let responses = try await withThrowingTaskGroup(of: HTTPClient.Response.self) { group in
                    for _ in 0..<16 { group.addTask { try client.postEvents(body, key: key) } }
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
            try await withTracker(db) { tracker in
                let badId = UUID().uuidString.lowercased()
                let events = [Wire.event(), Wire.event(id: badId, type: "click"), Wire.event()]
                let r = try tracker.client.postEvents(Wire.batch(events), key: key)
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
            try await withTracker(db) { tracker in
                let body = try await gzipped(Wire.batch((0..<3).map { _ in Wire.event() }))
                let r = try tracker.client.postEvents(body, key: key, headers: ["Content-Encoding": "gzip"])
                #expect(r.status == 200)
                #expect(r.json["accepted"] as? Int == 3)
                let corrupt = try tracker.client.postEvents(Data("not gzip".utf8), key: key, headers: ["Content-Encoding": "gzip"])
                #expect(corrupt.status == 400)
            }
        }
    }

    @Test func everyErrorStatusHasAJSONBodyWithCodeAndMessage() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            try await withTracker(db) { tracker in
                let c = tracker.client
                let ok = Wire.batch([Wire.event()])
                let cases: [(String, HTTPClient.Response, Int)] = [
                    ("no key", try c.request("POST", "/v1/events", headers: ["Content-Type": "application/json"], body: ok), 401),
                    ("unknown key", try c.postEvents(ok, key: "trk_unknown"), 401),
                    ("report key", try c.postEvents(ok, key: report), 403),
                    ("text/plain", try c.request("POST", "/v1/events", headers: ["Authorization": "Bearer \(ingest)", "Content-Type": "text/plain"], body: ok), 415),
                    ("brotli", try c.postEvents(ok, key: ingest, headers: ["Content-Encoding": "br"]), 415),
                    ("not JSON", try c.postEvents(Data("{nope".utf8), key: ingest), 400),
                    ("no events array", try c.postEvents(Data("{\"evts\":[]}".utf8), key: ingest), 400),
                    ("501 events", try c.postEvents(Wire.batch((0..<501).map { _ in Wire.event() }), key: ingest), 413),
                    ("600 KiB body", try c.postEvents(Data(repeating: 0x20, count: 600 * 1024), key: ingest), 413),
                    ("unknown route", try c.request("GET", "/v1/nothing"), 404),
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

    @Test func keyOverItsRateLimitGets429WithRetryAfterAndNothingStored() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withTracker(db, environment: ["TRACKER_RATE_LIMIT": "10"]) { tracker in
                let within = try tracker.client.postEvents(Wire.batch((0..<10).map { _ in Wire.event() }), key: key)
                #expect(within.status == 200, "one second of the limit at once")
                let tooMany = try tracker.client.postEvents(Wire.batch((0..<9).map { _ in Wire.event() }), key: key)
                #expect(tooMany.status == 429)
                #expect(tooMany.json["error"] as? String == "rate_limited")
                #expect(tooMany.headers["retry-after"] == "1", "9 events at 10/s are back within a second")
                // A batch bigger than a second of the limit is not refused forever: once the bucket
                // is full again it goes through (and leaves the key in debt).
                let big = Wire.batch((0..<25).map { _ in Wire.event() })
                let first = try tracker.client.postEvents(big, key: key)
                #expect(first.status == 429)
                try await Task.sleep(for: .seconds(Int(first.headers["retry-after"] ?? "") ?? 1))
                #expect(try tracker.client.postEvents(big, key: key).status == 200, "the retry after Retry-After succeeds")
                let inDebt = try tracker.client.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(inDebt.status == 429)
                #expect(Int(inDebt.headers["retry-after"] ?? "") ?? 0 >= 2, "25 events at 10/s: the debt takes more than a second")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "35")
        }
    }

    /// A batch is charged for every event it carries, valid or not, gzip or not; a batch then
    /// refused whole gets its charge back, so its corrected retry is not refused too.
    @Test func rateLimitChargesEveryEventSentAndRefundsBatchesRefusedWhole() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withTracker(db, environment: ["TRACKER_RATE_LIMIT": "10"]) { tracker in
                // 8 events, but sentAt is a number: the whole batch is refused (400) after its
                // 8 events were charged, and the charge comes back.
                let badSentAt = try JSONSerialization.data(withJSONObject: ["events": (0..<8).map { _ in Wire.event() }, "sentAt": 5])
                #expect(try tracker.client.postEvents(badSentAt, key: key).status == 400)
                let corrected = try tracker.client.postEvents(Wire.batch((0..<10).map { _ in Wire.event() }), key: key)
                #expect(corrected.status == 200, "the refused batch's charge was given back: \(corrected.text)")
                let gzipped = try await gzipped(Wire.batch((0..<5).map { _ in Wire.event() }))
                try await Task.sleep(for: .seconds(1.2))
                // Invalid events count too: 10 events, 8 of them rejected, use the whole second.
                let mixed = Wire.batch((0..<10).map { i in i < 2 ? Wire.event() : Wire.event(type: "nonsense") })
                let partly = try tracker.client.postEvents(mixed, key: key)
                #expect(partly.status == 200 && (partly.json["accepted"] as? Int) == 2, "\(partly.text)")
                let over = try tracker.client.postEvents(gzipped, key: key, headers: ["Content-Encoding": "gzip"])
                #expect(over.status == 429, "nothing left: the 8 rejected events were charged too")
                #expect(over.json["error"] as? String == "rate_limited")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "12")
        }
    }

    @Test func revokedKeyStopsWorking() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await APIKeys(pool: db.pool).revoke(name: "app")
            try await withTracker(db) { tracker in
                let response = try tracker.client.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(response.status == 401)
            }
        }
    }
}

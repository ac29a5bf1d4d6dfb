import Foundation
import Testing
import Tracker

/// The answers `ConnectionGuard` gives on the event loop (docs/RELIABILITY.md, overload): a
/// batch that arrives while every admission place is taken or whose key is over its rate
/// limit, and `GET /healthz`.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct QuickAnswerTests {
    @Test func aBatchArrivingWhileEveryPlaceIsTakenIsRefusedAndItsConnectionStaysUsable() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: raw sockets on a port: the refusal is written by the connection's NIO handler.
            try await withTracker(db, environment: ["TRACKER_MAX_CONCURRENT_BATCHES": "1", "TRACKER_APPEND_TIMEOUT": "120"]) { tracker in
                // The one place is held by a batch whose write waits for a lock.
                let locker = try Self.lockAppends(db)
                defer { locker.close() }
                var client = tracker.client
                // It waits for the lock until the refusal and /healthz below are read (up to 40 s each).
                client.readTimeoutSeconds = 120
                let held = Task { [client] in try client.postEvents(Wire.batch([Wire.event()]), key: key) }
                var waiting = false
                for _ in 0..<100 where !waiting {
                    try await Task.sleep(for: .milliseconds(50))
                    waiting = try await db.scalar("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'event_ids'::regclass") != "0"
                }
                #expect(waiting, "the first batch is waiting for the lock, holding the place")

                let refusedID = UUID().uuidString.lowercased()
                let body = Wire.batch([Wire.event(id: refusedID)])
                let socket = try RawSocket(port: tracker.port)
                socket.write(Self.head(of: body, key: key))
                socket.write(body)
                // Generous bounds: in one whole-suite run on a loaded machine the answer took over 10 s.
                let refusal = socket.read(timeout: .seconds(40)) { String(decoding: $0, as: UTF8.self).contains("}") }
                let text = String(decoding: refusal.data, as: UTF8.self)
                #expect(RawSocket.status(of: refusal.data) == 503, "\(text)")
                #expect(text.lowercased().contains("retry-after: 1"), "\(text)")
                #expect(text.contains("\"error\":\"overloaded\""), "\(text)")
                #expect(!refusal.closed, "the connection stays open after the refusal")
                #expect(text.lowercased().contains("x-request-id: "), "it carries a request id like every answer: \(text)")

                // The refused batch's body was read and dropped: the connection reads the next request.
                socket.write("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                let health = socket.read(timeout: .seconds(40)) { String(decoding: $0, as: UTF8.self).contains("}") }
                #expect(RawSocket.status(of: health.data) == 200, "\(String(decoding: health.data, as: UTF8.self))")
                #expect(String(decoding: health.data, as: UTF8.self).contains("{\"status\":\"ok\"}"))

                try locker.execute("COMMIT")
                #expect(try await held.value.status == 200, "the held batch is stored once the lock goes")
                #expect(try await db.scalar("SELECT count(*) FROM events WHERE id = $1::uuid", [refusedID]) == "0")
                // With the place free again, a batch goes through on a new connection.
                #expect(try client.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
            }
        }
    }

    /// A key with nothing left of its rate limit is refused as soon as the request head is in,
    /// before its body is even sent, and the connection reads the next request after the body.
    @Test func aKeyOverItsRateLimitIsRefusedAtTheRequestHead() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: raw sockets on a port: the refusal is written by the connection's NIO handler.
            try await withTracker(db, environment: ["TRACKER_RATE_LIMIT": "5"]) { tracker in
                #expect(try await tracker.postEvents(Wire.batch((0..<50).map { _ in Wire.event() }), key: key).status == 200,
                        "a batch over a second of the limit goes through a full bucket and leaves 45 events of debt")
                let refusedID = UUID().uuidString.lowercased()
                let body = Wire.batch([Wire.event(id: refusedID)])
                let socket = try RawSocket(port: tracker.port)
                socket.write(Self.head(of: body, key: key))
                let refusal = socket.read(timeout: .seconds(40)) { String(decoding: $0, as: UTF8.self).contains("}") }
                let text = String(decoding: refusal.data, as: UTF8.self)
                #expect(RawSocket.status(of: refusal.data) == 429, "answered with the body not sent: \(text)")
                #expect(text.contains("\"error\":\"rate_limited\""), "\(text)")
                // Reserved once (at the head, from the body's length) and settled to the 50
                // events once decoded: 45 events of debt, repaid at 5 a second, so at most 10 s
                // (less by the time this took). A reservation made at the head and again in the
                // route would leave about 24 s.
                let retryAfter = Int(text.lowercased().components(separatedBy: "retry-after: ").dropFirst().first?.prefix(while: \.isNumber) ?? "")
                #expect(retryAfter.map { (2...10).contains($0) } == true, "45 events of debt at 5/s, at most 10 s: \(text)")
                socket.write(body)
                socket.write("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                let health = socket.read(timeout: .seconds(40)) { String(decoding: $0, as: UTF8.self).contains("}") }
                #expect(RawSocket.status(of: health.data) == 200, "\(String(decoding: health.data, as: UTF8.self))")
                #expect(try await db.scalar("SELECT count(*) FROM events WHERE id = $1::uuid", [refusedID]) == "0")
            }
        }
    }

    /// Pipelined requests are answered in order: a `/healthz` behind a batch that waits for the
    /// database is not answered before the batch.
    @Test func aPipelinedHealthzWaitsForTheAnswerBeforeIt() async throws {
        // A process: raw sockets on a port: pipelined requests on one connection.
        try await Self.withAppendsWaiting { db, tracker, key, locker in
            let body = Wire.batch([Wire.event()])
            let socket = try RawSocket(port: tracker.port)
            socket.write(Self.head(of: body, key: key))
            socket.write(body)
            socket.write("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            let early = socket.read(timeout: .seconds(1))
            #expect(early.data.isEmpty, "nothing is answered while the batch waits: \(String(decoding: early.data, as: UTF8.self))")
            try locker.execute("COMMIT")
            let both = socket.read(timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).components(separatedBy: "HTTP/1.1 ").count >= 3 }
            let text = String(decoding: both.data, as: UTF8.self)
            let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst()
            #expect(answers.count == 2, "\(text)")
            #expect(answers.first?.contains("\"accepted\":1") == true, "the batch's answer comes first: \(text)")
            #expect(answers.last?.contains("{\"status\":\"ok\"}") == true, "then /healthz's: \(text)")
        }
    }

    /// A small batch is answered on the event loop and a large one by the route: the two answers
    /// carry the same fields, and both batches are stored.
    @Test func aSmallBatchAnsweredOnTheEventLoopCarriesTheRouteAnswersFields() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: raw sockets on a port: the small batch's answer is written by the connection's NIO handler.
            try await withTracker(db) { tracker in
                let small = Wire.batch([Wire.event()])
                let large = Wire.batch((0..<60).map { _ in Wire.event() })
                #expect(small.count <= 8 * 1024 && large.count > 8 * 1024, "one batch on each side of the event loop's bound")
                var fields: [[String: String]] = []
                for (body, id) in [(small, "small-1"), (large, "large-1")] {
                    let socket = try RawSocket(port: tracker.port)
                    socket.write(Self.head(of: body, key: key, fields: "X-Request-Id: \(id)\r\n"))
                    socket.write(body)
                    let answer = socket.read(timeout: .seconds(30)) { String(decoding: $0, as: UTF8.self).hasSuffix("]}") }
                    let text = String(decoding: answer.data, as: UTF8.self)
                    #expect(RawSocket.status(of: answer.data) == 200, "\(text)")
                    let head = text.components(separatedBy: "\r\n\r\n").first ?? ""
                    var named: [String: String] = [:]
                    for line in head.split(separator: "\r\n").dropFirst() {
                        let pair = line.split(separator: ":", maxSplits: 1)
                        if pair.count == 2 { named[pair[0].lowercased()] = pair[1].trimmingCharacters(in: .whitespaces) }
                    }
                    fields.append(named)
                    #expect(named["x-request-id"] == id, "\(text)")
                    #expect(named["server"] == "tracker", "\(text)")
                    #expect(named["content-type"] == "application/json", "\(text)")
                    #expect(named["date"]?.hasSuffix(" GMT") == true, "\(text)")
                    #expect(text.contains("\"accepted\":\(body == small ? 1 : 60),\"duplicates\":0,\"rejected\":[]"), "\(text)")
                }
                #expect(fields.count == 2 && Set(fields[0].keys) == Set(fields[1].keys), "\(fields)")
                #expect(try await db.scalar("SELECT count(*) FROM events") == "61")
            }
        }
    }

    /// Requests pipelined behind a small batch answered on the event loop are answered after
    /// it, in order, whether the route or the event loop answers them; one that asks to close
    /// the connection closes it once answered.
    @Test func requestsPipelinedBehindASmallBatchAreAnsweredInOrder() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: raw sockets on a port: pipelined requests on one connection.
            try await withTracker(db) { tracker in
                func post(_ body: Data, close: Bool = false) -> String {
                    Self.head(of: body, key: key, fields: close ? "Connection: close\r\n" : "") + String(decoding: body, as: UTF8.self)
                }
                let first = Wire.batch([Wire.event()])
                let invalid = Data("{\"events\": [".utf8)
                let last = Wire.batch([Wire.event(), Wire.event()])
                let socket = try RawSocket(port: tracker.port)
                socket.write(post(first) + "GET /healthz/ HTTP/1.1\r\nHost: t\r\n\r\n" + post(invalid) + post(last, close: true))
                let answered = socket.read(timeout: .seconds(30))
                let text = String(decoding: answered.data, as: UTF8.self)
                let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { String($0) }
                #expect(answered.closed, "the connection closes after the answer to the request that asked it to: \(text)")
                #expect(answers.count == 4, "\(text)")
                guard answers.count == 4 else { return }
                #expect(answers[0].hasPrefix("200") && answers[0].contains("\"accepted\":1,"), "\(answers[0])")
                #expect(answers[1].hasPrefix("200") && answers[1].contains("\"status\":\"ok\""), "\(answers[1])")
                #expect(answers[2].hasPrefix("400") && answers[2].contains("\"error\":\"invalid_json\""), "\(answers[2])")
                #expect(answers[3].hasPrefix("200") && answers[3].contains("\"accepted\":2,"), "\(answers[3])")

                // Alone on its connection, a batch that asks to close it is answered on the event loop, then closed.
                let alone = try RawSocket(port: tracker.port)
                alone.write(post(Wire.batch([Wire.event()]), close: true))
                let closing = alone.read(timeout: .seconds(30))
                let closingText = String(decoding: closing.data, as: UTF8.self)
                #expect(closing.closed && closingText.hasPrefix("HTTP/1.1 200") && closingText.contains("\"accepted\":1,"), "\(closingText)")
                #expect(try await db.scalar("SELECT count(*) FROM events") == "4")
            }
        }
    }

    /// A large body pipelined behind a small batch that waits for its commit stops the
    /// connection's reading past a bound, and is read and answered, in order, once the batch is.
    @Test func aLargeBodyPipelinedBehindAWaitingBatchIsAnsweredAfterIt() async throws {
        // A process: raw sockets on a port: pipelined requests on one connection.
        try await Self.withAppendsWaiting { db, tracker, key, locker in
            let small = Wire.batch([Wire.event()])
            let large = Wire.batch((0..<400).map { _ in Wire.event() })
            #expect(large.count > 64 * 1024, "more than the handler holds before it stops reading")
            func post(_ body: Data) -> Data { Data(Self.head(of: body, key: key).utf8) + body }
            let socket = try RawSocket(port: tracker.port)
            let writer = Task.detached { [socket] in
                socket.write(post(small) + post(large) + Data("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8))
            }
            let early = socket.read(timeout: .seconds(1))
            #expect(early.data.isEmpty, "nothing is answered while the first batch waits: \(String(decoding: early.data, as: UTF8.self))")
            try locker.execute("COMMIT")
            let all = socket.read(timeout: .seconds(30)) { String(decoding: $0, as: UTF8.self).components(separatedBy: "HTTP/1.1 ").count >= 4 }
            _ = await writer.value
            let text = String(decoding: all.data, as: UTF8.self)
            let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { String($0) }
            #expect(answers.count == 3, "\(text.prefix(2000))")
            guard answers.count == 3 else { return }
            #expect(answers[0].contains("\"accepted\":1,"), "\(answers[0])")
            #expect(answers[1].contains("\"accepted\":400,"), "\(answers[1])")
            #expect(answers[2].contains("{\"status\":\"ok\"}"), "\(answers[2])")
            #expect(try await db.scalar("SELECT count(*) FROM events") == "401")
        }
    }

    /// Small batches refused on the event loop give their bytes back to the body budget once:
    /// after many of them the budget still refuses a body that would pass it.
    @Test func smallBatchesRefusedOnTheEventLoopLeaveTheBodyBudgetWhole() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: raw sockets on a port: uploads held open on their connections.
            try await withTracker(db, environment: ["TRACKER_BODY_BUFFER_MIB": "1"]) { tracker in
                let invalid = Data(("{\"events\": [" + String(repeating: " ", count: 4000)).utf8)
                let socket = try RawSocket(port: tracker.port)
                for n in 0..<300 {
                    socket.write(Self.head(of: invalid, key: key) + String(decoding: invalid, as: UTF8.self))
                    let answer = socket.read(timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).hasSuffix("}") }
                    guard RawSocket.status(of: answer.data) == 400 else {
                        Issue.record("batch \(n): \(String(decoding: answer.data, as: UTF8.self))")
                        return
                    }
                }
                // Two uploads hold 800 KiB of the 1 MiB budget; a third passes it.
                let declared = Data(count: 500 * 1024), sent = Data(repeating: 0x20, count: 400 * 1024)
                var uploads: [RawSocket] = []
                for _ in 0..<2 {
                    let upload = try RawSocket(port: tracker.port)
                    upload.write(Self.head(of: declared, key: key))
                    upload.write(sent)
                    uploads.append(upload)
                }
                try await Task.sleep(for: .milliseconds(500))
                let third = try RawSocket(port: tracker.port)
                third.write(Self.head(of: declared, key: key))
                let writer = Task.detached { [third] in third.write(sent) }
                let refusal = third.read(timeout: .seconds(20)) { String(decoding: $0, as: UTF8.self).contains("}") }
                let text = String(decoding: refusal.data, as: UTF8.self)
                #expect(RawSocket.status(of: refusal.data) == 503 && text.contains("too many request bodies"), "\(text)")
                uploads.removeAll()
                _ = await writer.value
            }
        }
    }

    /// A small gzipped body is carried out on the event loop whatever it inflates to: past the
    /// loop's bound it is inflated and decoded on the blocking pool and stored, past the batch
    /// limit it is refused as the route refuses it.
    @Test func aSmallGzippedBodyIsAnsweredAsTheRouteAnswersIt() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withTracker(db) { tracker in
                // Ids that differ in a few digits: the batch compresses about as well as an SDK's does.
                let plain = Wire.batch((0..<400).map { i in
                    Wire.event(id: "00000000-0000-4000-8000-" + String(repeating: "0", count: 12 - String(i).count) + String(i), requestId: "req-many")
                })
                let many = try await gzipped(plain)
                #expect(many.count <= 8 * 1024 && plain.count > 32 * 1024, "small on the wire (\(many.count) bytes), past the bound inflated (\(plain.count))")
                let stored = try tracker.client.postEvents(many, key: key, headers: ["Content-Encoding": "gzip"])
                #expect(stored.status == 200 && stored.text.contains("\"accepted\":400,"), "\(stored.text)")

                let bomb = try await gzipped(Data(("{\"events\": [\"" + String(repeating: " ", count: 600 * 1024) + "\"]}").utf8))
                #expect(bomb.count <= 8 * 1024)
                let refused = try tracker.client.postEvents(bomb, key: key, headers: ["Content-Encoding": "gzip"])
                #expect(refused.status == 413 && refused.text.contains("\"error\":\"payload_too_large\""), "\(refused.text)")

                let broken = try tracker.client.postEvents(Data(many.prefix(many.count / 2)), key: key, headers: ["Content-Encoding": "gzip"])
                #expect(broken.status == 400 && broken.text.contains("\"error\":\"invalid_gzip\""), "\(broken.text)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "400")
        }
    }

    /// A request that asks to close the connection, pipelined behind a batch awaiting its
    /// commit, is answered after it, and nothing pipelined after it is read or stored.
    @Test func nothingAfterARequestThatClosesTheConnectionIsStored() async throws {
        // A process: raw sockets on a port: pipelined requests on one connection.
        try await Self.withAppendsWaiting { db, tracker, key, locker in
            let first = Wire.batch([Wire.event()])
            let after = Wire.batch([Wire.event()])
            let socket = try RawSocket(port: tracker.port)
            socket.write(Self.head(of: first, key: key) + String(decoding: first, as: UTF8.self)
                + "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                + Self.head(of: after, key: key) + String(decoding: after, as: UTF8.self))
            let early = socket.read(timeout: .seconds(1))
            #expect(early.data.isEmpty, "nothing is answered while the batch waits: \(String(decoding: early.data, as: UTF8.self))")
            try locker.execute("COMMIT")
            let answered = socket.read(timeout: .seconds(30))
            let text = String(decoding: answered.data, as: UTF8.self)
            let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst()
            #expect(answered.closed && answers.count == 2, "\(text)")
            #expect(answers.first?.contains("\"accepted\":1,") == true && answers.last?.contains("{\"status\":\"ok\"}") == true, "\(text)")
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await db.scalar("SELECT count(*) FROM events") == "1", "the batch after the close is not stored")
        }
    }

    /// A client that half-closes its connection after a small batch still gets the batch's
    /// answer, written once its commit is in, before the connection closes.
    @Test func aClientThatHalfClosesAfterASmallBatchGetsItsAnswer() async throws {
        // A process: raw sockets on a port: a half-closed connection.
        try await Self.withAppendsWaiting { db, tracker, key, locker in
            let body = Wire.batch([Wire.event()])
            let socket = try RawSocket(port: tracker.port)
            socket.write(Self.head(of: body, key: key) + String(decoding: body, as: UTF8.self))
            _ = Glibc.shutdown(socket.fd, Int32(SHUT_WR))
            let early = socket.read(timeout: .seconds(1))
            #expect(early.data.isEmpty && !early.closed, "the batch waits for its commit: \(String(decoding: early.data, as: UTF8.self))")
            try locker.execute("COMMIT")
            let answer = socket.read(timeout: .seconds(30))
            let text = String(decoding: answer.data, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200") && text.contains("\"accepted\":1,"), "\(text)")
            #expect(answer.closed, "then the connection closes")
        }
    }

    /// A request the parser cannot read, pipelined behind a small batch that waits for its
    /// commit, is answered after the batch.
    @Test func anUnreadableRequestBehindASmallBatchIsAnsweredAfterIt() async throws {
        // A process: raw sockets on a port: pipelined requests on one connection.
        try await Self.withAppendsWaiting { db, tracker, key, locker in
            let body = Wire.batch([Wire.event()])
            let socket = try RawSocket(port: tracker.port)
            socket.write(Self.head(of: body, key: key) + String(decoding: body, as: UTF8.self) + "NOT HTTP AT ALL\r\n\r\n")
            let early = socket.read(timeout: .seconds(1))
            #expect(early.data.isEmpty, "nothing is answered while the batch waits: \(String(decoding: early.data, as: UTF8.self))")
            try locker.execute("COMMIT")
            let answers = socket.read(timeout: .seconds(30))
            let text = String(decoding: answers.data, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200") && text.contains("\"accepted\":1,"), "the batch's answer comes first: \(text)")
            #expect(answers.closed, "the connection closes after the unreadable request's answer: \(text)")
        }
    }

    /// A session holding `event_ids` locked: appends wait until it commits.
    static func lockAppends(_ db: TestDatabase) throws -> Connection {
        let locker = try Connection.open(db.url)
        try locker.execute("BEGIN; LOCK TABLE event_ids IN ACCESS EXCLUSIVE MODE")
        return locker
    }

    /// Runs `body` with a tracker process, an ingest key and `locker`, a session that holds
    /// `event_ids` locked, so appends wait until `body` commits it (within 30 s).
    static func withAppendsWaiting(_ body: (TestDatabase, TrackerProcess, String, Connection) async throws -> Void) async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            try await withTracker(db, environment: ["TRACKER_APPEND_TIMEOUT": "30"]) { tracker in
                let locker = try lockAppends(db)
                defer { locker.close() }
                try await body(db, tracker, key, locker)
            }
        }
    }

    /// The head of a batch's request with `body`, with further header `fields` (each ending in CRLF).
    static func head(of body: Data, key: String, fields: String = "") -> String {
        "POST /v1/events HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer \(key)\r\nContent-Type: application/json\r\n\(fields)Content-Length: \(body.count)\r\n\r\n"
    }
}

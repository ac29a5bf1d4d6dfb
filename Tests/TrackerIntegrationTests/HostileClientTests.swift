import Foundation
import Testing
import Tracker

/// The ingest key ships inside every app, so anyone can hold one: nothing a client does with
/// its connections may stop the server serving the others.
@Suite struct HostileClientTests {
    @Test func stalledUploadsHoldNoPlaceAndAreAnswered408() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            let environment = ["TRACKER_MAX_CONCURRENT_BATCHES": "2", "TRACKER_REQUEST_TIMEOUT": "2"]
            // A process: raw sockets on a port: stalled uploads.
            try await withTracker(db, environment: environment) { tracker in
                let padding = String(repeating: "x", count: 400)
                let big = Wire.batch((0..<400).map { _ in Wire.event(extra: ["attributes": ["note": padding]]) })
                // More uploads than places, each stopped 100 bytes before its end.
                let stalled = try (0..<6).map { _ in try RawSocket(port: tracker.port) }
                for socket in stalled {
                    let head = "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(key)\r\n"
                        + "Content-Type: application/json\r\nContent-Length: \(big.count)\r\n\r\n"
                    #expect(socket.write(Data(head.utf8) + big.prefix(big.count - 100)))
                }
                let served = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(served.status == 200, "a client behind stalled uploads is served: \(served.text)")
                for socket in stalled {
                    let (data, closed) = socket.read(timeout: .seconds(10))
                    #expect(RawSocket.status(of: data) == 408, "\(String(decoding: data, as: UTF8.self))")
                    #expect(closed)
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "1")
        }
    }

    @Test func batchesBeyondTheConcurrencyLimitGet503WhileTheOthersAreWritten() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // The append's deadline (and its lock_timeout) is set far beyond the test, so the
            // write waits for the lock instead of getting its 503 after 4 s.
            // A process: raw sockets on a port: a body held open.
            try await withTracker(db, environment: ["TRACKER_MAX_CONCURRENT_BATCHES": "1", "TRACKER_APPEND_TIMEOUT": "120"]) { tracker in
                // Another session keeps every write waiting, so a batch that is in holds the only place.
                let blocker = try Connection.open(db.url)
                try blocker.execute("BEGIN; LOCK TABLE event_ids IN SHARE MODE")
                let first = Wire.batch([Wire.event()])
                let writing = try tracker.client.startRequest(
                    "POST", "/v1/events", headers: ["Authorization": "Bearer \(key)", "Content-Type": "application/json"],
                    bodyPrefix: first, declaredLength: first.count)
                // Generous: at the start of the whole suite one run took over 10 s to get there.
                let waiting = try await eventually(within: .seconds(40)) { () -> Bool? in
                    let n = try await db.scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%event_ids (id)%'")
                    return n == "1" ? true : nil
                }
                try #require(waiting == true, "the first batch never reached its write")
                let refused = try await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                #expect(refused.status == 503)
                #expect(refused.json["error"] as? String == "overloaded")
                #expect(refused.headers["retry-after"] != nil)
                try blocker.execute("COMMIT")
                #expect(try await onThreadOfItsOwn { try tracker.client.finishRequest(writing, rest: Data()) }.status == 200)
                #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
                blocker.close()
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "2")
        }
    }

    @Test func connectionsOverTheLimitGet503AndTheRestAreServed() async throws {
        try await withTestDatabase { db in
            // No idle timeout in the way: the eight connections stay open however slowly they are made.
            let environment = ["TRACKER_IDLE_TIMEOUT": "120", "TRACKER_MAX_CONNECTIONS": "8"]
            // A process: raw sockets on a port: the connection limit.
            try await withTracker(db, environment: environment) { tracker in
                // Eight connections, each answered (so counted by the server) before the next opens:
                // connections opened at once reach the server's two event loops in either order.
                // A 503 here means a connection of the harness's readiness probe was still being
                // closed on the server's other event loop: that place frees within moments, so the
                // same connection is tried again (a refusal of all eight would still fail).
                var held: [RawSocket] = []
                for _ in 0..<8 {
                    var status: Int?
                    for _ in 0..<25 {
                        let socket = try RawSocket(port: tracker.port)
                        _ = socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                        status = socket.responseStatus(timeout: .seconds(20))
                        if status == 200 { held.append(socket); break }
                        try await Task.sleep(for: .milliseconds(200))
                    }
                    #expect(status == 200, "connection \(held.count + 1) of the 8 within the limit was not served")
                }
                let extra = try RawSocket(port: tracker.port)
                _ = extra.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                let over: Data? = extra.read(timeout: .seconds(20)).data
                let refusal = String(decoding: over ?? Data(), as: UTF8.self)
                #expect(refusal.contains("too_many_connections"), "the ninth connection is refused cleanly: \(refusal)")
                #expect(refusal.lowercased().contains("retry-after"))
                // The connections within the limit are still served.
                for socket in held.prefix(3) {
                    _ = socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    #expect(socket.responseStatus(timeout: .seconds(20)) == 200)
                }
            }
        }
    }

    @Test func idleConnectionsAndTrickledHeadersAreClosed() async throws {
        try await withTestDatabase { db in
            // A process: raw sockets on a port: idle and trickling connections.
            try await withTracker(db, environment: ["TRACKER_IDLE_TIMEOUT": "3"]) { tracker in
                let idle = try (0..<7).map { _ in try RawSocket(port: tracker.port) }
                let trickle = try RawSocket(port: tracker.port)

                // A header sent a byte every 250 ms never completes; it is closed like an idle connection.
                let started = ContinuousClock.now
                var trickleClosed = false
                for byte in "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: \(String(repeating: "a", count: 80))".utf8 {
                    if !trickle.write(Data([byte])) || trickle.read(timeout: .milliseconds(250)).closed {
                        trickleClosed = true
                        break
                    }
                }
                #expect(trickleClosed, "a trickled header is closed after the idle timeout")
                #expect(ContinuousClock.now - started < .seconds(15))
                for socket in idle {
                    #expect(socket.read(timeout: .seconds(10)).closed, "an idle connection is closed")
                }
                #expect(try await tracker.request("GET", "/healthz").status == 200)
            }
        }
    }

    @Test func aFloodOfConnectionsUpToTheDescriptorLimitNeitherCrashesNorStarvesTheServer() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            // A process: the process's own descriptor limit.
            try await withTracker(db, environment: ["TRACKER_IDLE_TIMEOUT": "2"], descriptorLimit: 256) { tracker in
                let cpuBefore = cpuSeconds(of: tracker.process.pid)
                // More connections than the process has descriptors: the server answers the first
                // ones, refuses a few with 503, and leaves the rest in the kernel's backlog.
                var flood: [RawSocket] = []
                for _ in 0..<300 { if let s = try? RawSocket(port: tracker.port) { flood.append(s) } }
                let served = try await eventually(within: .seconds(20)) { () -> Int? in
                    let r = try? await tracker.postEvents(Wire.batch([Wire.event()]), key: key)
                    return r?.status == 200 ? 200 : nil
                }
                #expect(served == 200, "a client is served while the flood holds its connections")
                #expect(tracker.process.isRunning)
                let cpu = cpuSeconds(of: tracker.process.pid) - cpuBefore
                #expect(cpu < 3, "no busy loop while the flood lasts: \(cpu) s of CPU")
                // The server frees a descriptor only once it reads the close, so "served again"
                // is a matter of moments after the flood ends, not of the next instant.
                flood.removeAll()
                let after = try await eventually(within: .seconds(10)) { () -> Int? in
                    (try? await tracker.request("GET", "/healthz").status) == 200 ? 200 : nil
                }
                #expect(after == 200, "the server answers again once the flood is gone")
            }
        }
    }
}

/// CPU seconds (user + system) a process has used.
func cpuSeconds(of pid: pid_t) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return 0 }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

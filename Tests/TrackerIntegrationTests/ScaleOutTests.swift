import Foundation
import Testing
import Tracker

/// The server keeps no state of its own: two trackers behind a load balancer store one stream
/// exactly once, even when one of them is killed in the middle of it.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ScaleOutTests {
    static let senders = 3
    static let batchesPerSender = 16
    static let eventsPerBatch = 25

    @Test func twoTrackersBehindALoadBalancerStoreEveryEventExactlyOnceThroughAKillNine() async throws {
        try await withTestDatabase { db in
            let ingestKey = try await db.createKey("app", scope: .ingest)
            let reportKey = try await db.createKey("dashboard", scope: .report)
            // A process: two servers on one database, one of them killed with SIGKILL.
            let first = try await TrackerProcess(databaseURL: db.url)
            let second = try await TrackerProcess(databaseURL: db.url)
            let balancer = try LoadBalancer(upstreams: ["t1": first.port, "t2": second.port])
            try await balancer.waitUntilServing(["t1", "t2"])

            // Every event is the impression of its own ad, so the report must count them all.
            let batches = (0..<Self.senders * Self.batchesPerSender).map { b in
                (0..<Self.eventsPerBatch).map { i in Wire.event(requestId: "scale-\(b)-\(i)") }
            }
            let sentIDs = Set(batches.joined().map { $0["id"] as! String })
            let bodies = batches.map { Wire.batch($0) }

            // Stream through the balancer from several clients; kill one tracker a third of the way in.
            let stream = StreamProgress()
            let sending = Task.detached {
                await withTaskGroup(of: Void.self) { group in
                    for s in 0..<Self.senders {
                        let mine = Array(bodies[(s * Self.batchesPerSender)..<((s + 1) * Self.batchesPerSender)])
                        group.addTask { await deliver(mine, key: ingestKey, via: balancer.client, progress: stream, pausingForKill: true) }
                    }
                }
            }
            // Every sender stops a third of the way in; once all wait, they go on at a steady pace and
            // the tracker is killed at once, so requests are in flight and later ones meet the dead
            // tracker before the balancer's health check (200 ms) marks it down.
            let deadline = ContinuousClock.now + .seconds(60)
            while stream.waitingAtGate < Self.senders, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            // The count is read the moment the signal is sent: waiting for the exit first resumes this
            // task only when the test process has a thread free, and by then the stream may be done.
            stream.openGate()
            first.process.signal(SIGKILL)
            let beforeKill = stream.acknowledgedBatches
            await first.kill9()
            await sending.value
            let retries = try balancer.retries()
            print("scale-out: killed t1 after \(beforeKill) of \(bodies.count) batches; served by \(stream.servedBy); " +
                  "balancer retried \(retries.retried), redispatched \(retries.redispatched); client retries \(stream.retries)")
            #expect(beforeKill < bodies.count, "the kill came mid-stream")
            #expect(retries.retried + retries.redispatched + stream.retries > 0, "requests that met the dead tracker were retried")

            #expect(stream.failedBatches == 0, "every batch is acknowledged, by retries if need be")
            #expect(stream.acknowledgedEvents == sentIDs.count)
            #expect(stream.servedBy.keys.sorted() == ["t1", "t2"], "both trackers took part: \(stream.servedBy)")
            let stored = try await db.rows("SELECT id::text FROM events").compactMap { $0[0] }
            #expect(stored.count == sentIDs.count, "no event is stored twice")
            #expect(Set(stored) == sentIDs, "every acknowledged event is in the log")

            // The killed tracker comes back; a full re-send through both stores nothing new.
            // A process: the killed server restarts on its port.
            let restarted = try await TrackerProcess(databaseURL: db.url, port: first.port)
            try await balancer.waitUntilServing(["t1", "t2"])
            let resend = StreamProgress()
            await Task.detached { await deliver(bodies, key: ingestKey, via: balancer.client, progress: resend) }.value
            #expect(resend.failedBatches == 0)
            #expect(resend.storedEvents == 0, "a re-sent event is a duplicate, never stored again")
            #expect(resend.acknowledgedEvents == sentIDs.count)
            #expect(resend.servedBy.keys.sorted() == ["t1", "t2"])
            #expect(try await db.scalar("SELECT count(*) FROM events") == String(sentIDs.count))

            // And the report, read through the balancer, counts every ad once.
            let impressions = try await eventually(within: .seconds(30)) { () -> Int? in
                let today = String(Wire.isoNow().prefix(10)), yesterday = String(Wire.isoNow(offsetSeconds: -86_400).prefix(10))
                let client = balancer.client
                let r = try await onThreadOfItsOwn {
                    try client.request("GET", "/v1/reports/summary?from=\(yesterday)&to=\(today)", headers: ["Authorization": "Bearer \(reportKey)"])
                }
                let rows = r.json["rows"] as? [[String: Any]] ?? []
                let total = rows.reduce(0) { $0 + ($1["impressions"] as? Int ?? 0) }
                return total == sentIDs.count ? total : nil
            }
            #expect(impressions == sentIDs.count)
            await balancer.stop()
            await restarted.kill9()
            await second.kill9()
        }
    }
}

/// What the clients of one stream saw.
final class StreamProgress: @unchecked Sendable {
    // @unchecked: every field is read and written under `lock`.
    private let lock = NSLock()
    private var _acknowledgedBatches = 0, _acknowledgedEvents = 0, _storedEvents = 0, _failedBatches = 0, _retries = 0
    private var _servedBy: [String: Int] = [:]

    var acknowledgedBatches: Int { lock.withLock { _acknowledgedBatches } }
    var acknowledgedEvents: Int { lock.withLock { _acknowledgedEvents } }
    var storedEvents: Int { lock.withLock { _storedEvents } }
    var failedBatches: Int { lock.withLock { _failedBatches } }
    var retries: Int { lock.withLock { _retries } }
    var servedBy: [String: Int] { lock.withLock { _servedBy } }

    func acknowledged(accepted: Int, duplicates: Int, server: String) {
        lock.withLock {
            _acknowledgedBatches += 1
            _acknowledgedEvents += accepted + duplicates
            _storedEvents += accepted
            _servedBy[server, default: 0] += 1
        }
    }

    private let gate = NSCondition()
    private var _waitingAtGate = 0, _gateOpen = false

    /// Senders waiting in `waitAtGate`.
    var waitingAtGate: Int { gate.withLock { _waitingAtGate } }

    /// Lets the senders waiting in `waitAtGate` go on.
    func openGate() {
        gate.withLock { _gateOpen = true }
        gate.broadcast()
    }

    /// Waits until `openGate()` was called, at most 60 s.
    func waitAtGate() {
        let deadline = Date().addingTimeInterval(60)
        gate.withLock {
            _waitingAtGate += 1
            while !_gateOpen, gate.wait(until: deadline) {}
        }
    }

    func retried() { lock.withLock { _retries += 1 } }
    func failed() { lock.withLock { _failedBatches += 1 } }
}

/// Sends each batch until it is acknowledged (a 200), at most 40 tries 100 ms apart, as a
/// client SDK would. Runs on a thread of its own: the HTTP client blocks.
func deliver(_ bodies: [Data], key: String, via client: HTTPClient, progress: StreamProgress, pausingForKill: Bool = false) async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            for (index, body) in bodies.enumerated() {
                if pausingForKill {
                    if index == bodies.count / 3 { progress.waitAtGate() }
                    if index > bodies.count / 3 { Thread.sleep(forTimeInterval: 0.025) }
                }
                var acknowledged = false
                for attempt in 0..<40 where !acknowledged {
                    if attempt > 0 {
                        progress.retried()
                        Thread.sleep(forTimeInterval: 0.1)
                    }
                    guard let r = try? client.postEvents(body, key: key), r.status == 200 else { continue }
                    progress.acknowledged(accepted: r.json["accepted"] as? Int ?? 0, duplicates: r.json["duplicates"] as? Int ?? 0,
                                          server: r.headers["x-tracker-server"] ?? "?")
                    acknowledged = true
                }
                if !acknowledged { progress.failed() }
            }
            done.resume()
        }
    }
}

/// Polls `probe` every 100 ms until it returns a value or `within` has passed.
func eventually<T>(within limit: Duration, _ probe: () async throws -> T?) async throws -> T? {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if let value = try await probe() { return value }
        try await Task.sleep(for: .milliseconds(100))
    }
    return try await probe()
}

/// HAProxy on a loopback port in front of the given trackers: round robin, health checks every
/// 200 ms, and a failed or dropped request retried on the other tracker (safe: ingestion is
/// idempotent). Each response says which tracker answered in `X-Tracker-Server`.
final class LoadBalancer: Sendable {
    let port: Int
    let statsPort: Int
    let process: Subprocess
    let directory: URL

    init(upstreams: [String: Int]) throws {
        let binary = try #require(["/usr/sbin/haproxy", "/usr/bin/haproxy"].first { FileManager.default.isExecutableFile(atPath: $0) },
                                  "haproxy is missing: run scripts/setup.sh")
        port = freeLoopbackPort()
        statsPort = port == 59_999 ? 30_000 : port + 1
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-lb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let servers = upstreams.sorted { $0.key < $1.key }
            .map { "    server \($0.key) 127.0.0.1:\($0.value) check inter 200ms fall 1 rise 1" }
            .joined(separator: "\n")
        let config = """
            global
                maxconn 256
                tune.bufsize 65536
            defaults
                mode http
                timeout connect 1s
                timeout client 30s
                timeout server 15s
                timeout check 1s
                retries 3
                option redispatch 1
                retry-on all-retryable-errors
            frontend stats
                bind 127.0.0.1:\(statsPort)
                stats enable
                stats uri /stats
            frontend tracker
                bind 127.0.0.1:\(port)
                default_backend trackers
            backend trackers
                balance roundrobin
                option httpchk GET /healthz
                http-response set-header X-Tracker-Server %s
            \(servers)

            """
        let file = directory.appendingPathComponent("haproxy.cfg")
        try config.write(to: file, atomically: true, encoding: .utf8)
        process = try Subprocess(binary, ["-db", "-f", file.path], outputPath: directory.appendingPathComponent("haproxy.log").path)
    }

    var client: HTTPClient { HTTPClient(port: port) }

    /// Waits (at most 60 s: debug trackers on a loaded machine) until every named upstream has
    /// answered a request through the balancer.
    func waitUntilServing(_ names: Set<String>) async throws {
        var seen: Set<String> = []
        let deadline = ContinuousClock.now + .seconds(60)
        while !names.isSubset(of: seen), ContinuousClock.now < deadline, process.isRunning {
            if let r = try? client.request("GET", "/healthz"), r.status == 200, let server = r.headers["x-tracker-server"] {
                seen.insert(server)
            } else {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        let log = (try? String(contentsOf: directory.appendingPathComponent("haproxy.log"), encoding: .utf8)) ?? ""
        try #require(names.isSubset(of: seen), "the balancer did not reach \(names.subtracting(seen).sorted()):\n\(log)")
    }

    /// How often the balancer retried a request (`wretr`) and sent one to the other tracker
    /// (`wredis`), from its statistics.
    func retries() throws -> (retried: Int, redispatched: Int) {
        let csv = try HTTPClient(port: statsPort).request("GET", "/stats;csv").text.split(separator: "\n")
        let header = (csv.first ?? "").dropFirst(2).split(separator: ",", omittingEmptySubsequences: false)
        let backend = try #require(csv.first { $0.hasPrefix("trackers,BACKEND,") }).split(separator: ",", omittingEmptySubsequences: false)
        func value(_ name: String) -> Int { header.firstIndex(of: Substring(name)).flatMap { Int(backend[$0]) } ?? 0 }
        return (value("wretr"), value("wredis"))
    }

    func stop() async {
        process.signal(SIGTERM)
        _ = await process.exitStatus()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit {
        if process.isRunning {
            kill(process.pid, SIGKILL)
            _ = process.waitBlocking()
        }
    }
}

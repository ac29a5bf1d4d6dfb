import Foundation
import Synchronization
import Testing
import Tracker
import TrackerClient

extension TestEnvironment {
    /// The TrackerClientProbe binary `scripts/test.sh` built (a program that uses TrackerClient).
    static var clientProbe: String? { ProcessInfo.processInfo.environment["TRACKER_CLIENT_PROBE"] }
}

/// TrackerClient against the real `tracker serve` on loopback, through the failures it is
/// built for; afterwards every event is in the log exactly once and the reports count each ad.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ClientDeliveryTests {
    /// Four events per ad: loaded, impression, a click on MainImage, the AdChoices icon.
    static func recordAds(_ tracker: AdTracker, _ count: Int, tag: String) -> [String] {
        var ids: [String] = []
        for n in 0..<count {
            let ad = tracker.adLoaded(requestId: "\(tag)-\(n)", adUnit: "/1234/home/native", format: .custom(formatID: "10063170"),
                                      eea: true, reservation: true)
            ids += [ad.loadEventID!, ad.recordImpression(), ad.recordClick(onAsset: "MainImage", action: .customHandler),
                    ad.recordAdChoicesImpression()].map { $0.uuidString.lowercased() }
        }
        return ids
    }

    /// A client for `port` with short waits (loopback), its queue in a fresh folder.
    static func client(port: Int, key: String, flushAt: Int = 50, maxBatchEvents: Int = 500) throws -> (AdTracker, URL) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("client-queue-\(UUID().uuidString)")
        var c = AdTracker.Configuration(endpoint: URL(string: "http://127.0.0.1:\(port)")!, ingestKey: key, queueDirectory: folder)
        c.flushAt = flushAt
        c.maxBatchEvents = maxBatchEvents
        c.flushInterval = .milliseconds(100)
        c.backoff = AdTracker.Backoff(initial: .milliseconds(100), maximum: .seconds(1))
        c.requestTimeout = .seconds(10)
        return (try AdTracker(configuration: c), folder)
    }

    /// Flushes until the queue is empty, following `willRetry`; fails after `limit`.
    static func deliverEverything(_ tracker: AdTracker, within limit: Duration = .seconds(60)) async throws {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            switch await tracker.flush() {
            case .delivered where tracker.statistics.pending == 0:
                return
            case .stopped(let reason):
                Issue.record("delivery stopped: \(reason)")
                return
            default:
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        Issue.record("events still queued after \(limit): \(tracker.statistics)")
    }

    @Test func aKill9OfTheServerMidDeliveryLosesAndDoublesNothing() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            // A process: the client's own HTTP stack delivers to a port; the server is killed and restarted there.
            var server = try await TrackerProcess(databaseURL: db.url)
            let port = server.port
            let (client, folder) = try Self.client(port: port, key: ingest)
            defer { try? FileManager.default.removeItem(at: folder) }
            let delivery = Task { await client.run() }
            defer { delivery.cancel() }

            var ids = Self.recordAds(client, 500, tag: "kill9-a")
            // Kill the server while those batches are on their way.
            _ = try await eventually(within: .seconds(30)) { () -> Bool? in
                try await db.scalar("SELECT count(*) FROM events").flatMap(Int.init).map { $0 > 0 ? true : nil } ?? nil
            }
            await server.kill9()
            let atKill = Int(try await db.scalar("SELECT count(*) FROM events") ?? "0") ?? 0
            try #require(atKill < ids.count, "all \(ids.count) events were stored before the kill; record more")
            ids += Self.recordAds(client, 100, tag: "kill9-b")
            let refused = try await eventually(within: .seconds(30)) { client.statistics.retries > 0 ? true : nil }
            #expect(refused == true, "the client met the dead server")
            server = try await TrackerProcess(databaseURL: db.url, port: port)
            try await Self.deliverEverything(client)

            try await Self.expectStoredOnce(ids, in: db)
            // A batch committed just before the kill loses its answer; its retry comes back as duplicates.
            #expect(client.statistics.accepted + client.statistics.duplicates == ids.count)
            #expect(client.statistics.dropped.isEmpty)
            try await Self.expectReportCounts(server, key: report, ads: 600)
            await server.kill9()
        }
    }

    @Test func aPostgreSQLRestartMidDeliveryLosesAndDoublesNothing() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("client-pg-\(UUID().uuidString)").path
        let pgPort = freeLoopbackPort()
        try await TestEnvironment.postgres("start", dir: dir, port: pgPort)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let db = try await TestDatabase(adminURL: "postgresql://postgres@127.0.0.1:\(pgPort)/postgres")
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            // A process: the client's own HTTP stack delivers to a port.
            try await withTracker(db) { server in
                let notices = ServiceUnavailableWatcher()
                let (client, folder) = try Self.client(port: server.port, key: ingest)
                defer { try? FileManager.default.removeItem(at: folder) }
                notices.watch(client)
                let delivery = Task { await client.run() }
                defer { delivery.cancel() }

                var ids = Self.recordAds(client, 50, tag: "pg-a")
                try await Self.deliverEverything(client)
                try await TestEnvironment.postgres("stop", dir: dir, port: pgPort)
                ids += Self.recordAds(client, 50, tag: "pg-b")
                let unavailable = try await eventually(within: .seconds(30)) { notices.saw503 ? true : nil }
                #expect(unavailable == true, "the tracker answered 503 while PostgreSQL was down")
                #expect(client.statistics.pending == 200, "nothing was taken for delivered")
                try await TestEnvironment.postgres("start", dir: dir, port: pgPort)
                try await Self.deliverEverything(client)

                try await Self.expectStoredOnce(ids, in: db)
                #expect(client.statistics.accepted + client.statistics.duplicates == ids.count)
                try await Self.expectReportCounts(server, key: report, ads: 100)
                notices.stop()
            }
            await db.drop()
        } catch {
            try? await TestEnvironment.postgres("stop", dir: dir, port: pgPort)
            throw error
        }
        try await TestEnvironment.postgres("stop", dir: dir, port: pgPort)
    }

    @Test func rateLimited429sAreWaitedOutAsRetryAfterSays() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            // A process: the client's own HTTP stack delivers to a port.
            try await withTracker(db, environment: ["TRACKER_RATE_LIMIT": "100"]) { server in
                let (client, folder) = try Self.client(port: server.port, key: ingest, flushAt: 100, maxBatchEvents: 100)
                defer { try? FileManager.default.removeItem(at: folder) }
                let waits = RateLimitWaits()
                let watcher = Task {
                    for await notice in client.notices {
                        if case .retrying(let after, .status(429, error: "rate_limited", message: _)) = notice { waits.add(after) }
                    }
                }
                defer { watcher.cancel() }
                let started = ContinuousClock.now
                let ids = Self.recordAds(client, 150, tag: "rate")
                try await Self.deliverEverything(client)
                let elapsed = ContinuousClock.now - started

                try await Self.expectStoredOnce(ids, in: db)
                let seen = waits.all
                #expect(!seen.isEmpty, "600 events at 100/s met 429")
                #expect(seen.allSatisfy { $0 >= .seconds(1) }, "every wait at least Retry-After (1 s or more): \(seen)")
                #expect(elapsed >= .seconds(4), "600 events at 100/s with one second of burst take about 5 s, took \(elapsed)")
                #expect(client.statistics.requests <= 6 + seen.count, "one request per batch and per wait, no spinning")
                try await Self.expectReportCounts(server, key: report, ads: 150)
            }
        }
    }

    @Test func aKill9OfTheClientMidFlushLosesAndDoublesNothing() async throws {
        let probe = try #require(TestEnvironment.clientProbe, "run the integration tests through scripts/test.sh (it sets TRACKER_CLIENT_PROBE)")
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            // A process: `tracker deliver` (another process) delivers to a port.
            try await withTracker(db) { server in
                let work = FileManager.default.temporaryDirectory.appendingPathComponent("client-kill-\(UUID().uuidString)")
                try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: work) }
                let queue = work.appendingPathComponent("queue").path
                let idsFile = work.appendingPathComponent("ids").path
                let ads = 5000
                let recorded = try await Subprocess.run(probe, ["record", "--queue", queue, "--ads", String(ads), "--ids", idsFile],
                                                        outputPath: work.appendingPathComponent("record.log").path)
                try #require(recorded == 0)
                let ids = try String(contentsOfFile: idsFile, encoding: .utf8).split(separator: "\n").map(String.init)
                try #require(ids.count == ads * 4)

                let deliverArguments = ["deliver", "--queue", queue, "--endpoint", "http://127.0.0.1:\(server.port)", "--key", ingest]
                let first = try Subprocess(probe, deliverArguments, outputPath: work.appendingPathComponent("deliver-1.log").path)
                let stored = try await eventually(within: .seconds(60)) { () -> Int? in
                    let n = Int(try await db.scalar("SELECT count(*) FROM events") ?? "0") ?? 0
                    return n > 0 ? n : nil
                }
                first.signal(SIGKILL)
                #expect(await first.exitStatus() == 128 + SIGKILL)
                let atKill = Int(try await db.scalar("SELECT count(*) FROM events") ?? "0") ?? 0
                try #require(stored != nil && atKill < ids.count,
                             "the client finished before it was killed (\(atKill) of \(ids.count) stored); record more ads")

                let secondLog = work.appendingPathComponent("deliver-2.log").path
                let second = try await Subprocess.run(probe, deliverArguments, outputPath: secondLog)
                let statistics = try String(contentsOfFile: secondLog, encoding: .utf8)
                #expect(second == 0, "the restarted client delivered the rest: \(statistics)")
                try await Self.expectStoredOnce(ids, in: db)
                let line = try #require(statistics.split(separator: "\n").last.map(String.init))
                let numbers = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Int])
                #expect(numbers["recovered"]! >= ids.count - atKill, "the queue held at least what was not stored at the kill")
                #expect(numbers["accepted"]! > 0)
                #expect(numbers["recovered"] == numbers["accepted"]! + numbers["duplicates"]!,
                        "what was stored but not yet marked delivered came back as duplicates, not as new events")
                try await Self.expectReportCounts(server, key: report, ads: ads)
            }
        }
    }

    // MARK: Checks

    /// Every id is in the log exactly once, and nothing else is.
    static func expectStoredOnce(_ ids: [String], in db: TestDatabase, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let array = "{" + ids.joined(separator: ",") + "}"
        let row = try await db.rows("SELECT count(*), count(DISTINCT id), (SELECT count(*) FROM events) FROM events WHERE id = ANY($1::uuid[])", [array])
        #expect(row.first == [String(ids.count), String(ids.count), String(ids.count)],
                "stored, distinct, all rows of the log", sourceLocation: sourceLocation)
    }

    /// The summary and AdChoices reports count each ad once: one impression, one attributed
    /// click, one AdChoices impression, for EEA reservation ads all with the icon.
    static func expectReportCounts(_ server: TrackerProcess, key: String, ads: Int,
                                   sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let from = String(Wire.isoNow(offsetSeconds: -86_400).prefix(10)), to = String(Wire.isoNow(offsetSeconds: 86_400).prefix(10))
        let auth = ["Authorization": "Bearer \(key)"]
        // A report waits at most TRACKER_REPORT_WAIT for the projector; on a machine loaded by the
        // whole suite it may answer before it caught up (it says so in its lag header): ask again then.
        let caughtUp = try await eventually(within: .seconds(60)) { () -> HTTPClient.Response? in
            let r = try await server.request("GET", "/v1/reports/summary?from=\(from)&to=\(to)&adUnit=/1234/home/native", headers: auth)
            return r.status != 200 || r.headers["x-projection-lag-events"] == "0" ? r : nil
        }
        let summary = try #require(caughtUp, "the projections caught up with the log", sourceLocation: sourceLocation)
        #expect(summary.status == 200, sourceLocation: sourceLocation)
        let totals = sum(summary.json["rows"] as? [[String: Any]] ?? [])
        #expect(totals["impressions"] == ads, sourceLocation: sourceLocation)
        #expect(totals["duplicateImpressions"] == 0, sourceLocation: sourceLocation)
        #expect(totals["clicks"] == ads, sourceLocation: sourceLocation)
        #expect(totals["attributedClicks"] == ads, sourceLocation: sourceLocation)
        #expect(totals["adchoicesImpressions"] == ads, sourceLocation: sourceLocation)
        let adchoices = try await server.request("GET", "/v1/reports/adchoices?from=\(from)&to=\(to)&adUnit=/1234/home/native", headers: auth)
        let compliance = sum(adchoices.json["rows"] as? [[String: Any]] ?? [])
        #expect(compliance["eeaReservationImpressions"] == ads, sourceLocation: sourceLocation)
        #expect(compliance["withAdChoices"] == ads, sourceLocation: sourceLocation)
    }

    static func sum(_ rows: [[String: Any]]) -> [String: Int] {
        var out: [String: Int] = [:]
        for row in rows {
            for (name, value) in row { if let n = value as? Int { out[name, default: 0] += n } }
        }
        return out
    }
}

/// Watches a client's notices for a 503 from the tracker.
final class ServiceUnavailableWatcher: Sendable {
    private let seen = Atomic<Bool>(false)
    private let task = Mutex<Task<Void, Never>?>(nil)

    var saw503: Bool { seen.load(ordering: .relaxed) }

    func watch(_ client: AdTracker) {
        task.withLock {
            $0 = Task {
                for await notice in client.notices {
                    if case .retrying(_, .status(503, error: _, message: _)) = notice { self.seen.store(true, ordering: .relaxed) }
                }
            }
        }
    }

    func stop() {
        task.withLock { $0?.cancel() }
    }
}

/// The waits a client announced after a 429.
final class RateLimitWaits: Sendable {
    private let waits = Mutex<[Duration]>([])

    var all: [Duration] { waits.withLock { $0 } }

    func add(_ wait: Duration) {
        waits.withLock { $0.append(wait) }
    }
}

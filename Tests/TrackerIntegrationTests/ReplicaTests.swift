import Foundation
import Testing
import Tracker

/// Reports served from a streaming replica (REPORT_DATABASE_URL) while ingestion writes to the primary.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct ReplicaTests {
    static let ads = 20

    @Test func reportsReadFromAHotStandbyConvergeWithinSecondsOfIngestionOnThePrimary() async throws {
        let primary = PrivateCluster(), standby = PrivateCluster()
        do {
            try await TestEnvironment.postgres("start", dir: primary.dir, port: primary.port)
            try await standby.cloneAsStandby(of: primary)
            try await readReportsFromTheStandby(primary: primary, standby: standby)
        } catch {
            await standby.remove()
            await primary.remove()
            throw error
        }
        await standby.remove()
        await primary.remove()
    }

    func readReportsFromTheStandby(primary: PrivateCluster, standby: PrivateCluster) async throws {

        let db = try await TestDatabase(adminURL: primary.url(database: "postgres"))
        let ingestKey = try await db.createKey("app", scope: .ingest)
        let reportKey = try await db.createKey("dashboard", scope: .report)
        let replicaURL = standby.url(database: db.name)
        let replica = ConnectionPool(conninfo: replicaURL, maxConnections: 1, logger: TestEnvironment.logger)
        defer { replica.close() }
        let inRecovery = try await eventually(within: .seconds(10)) {
            try? await replica.withConnection { try $0.query("SELECT pg_is_in_recovery()").bool(0, 0) }
        }
        #expect(inRecovery == true, "REPORT_DATABASE_URL points at a standby")
        // What a reader of the log asks for (the xmin of its snapshot) is answered on a standby too.
        #expect(try await replica.withConnection { try $0.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").string(0, 0) } != nil)

        // A process: two processes' worth of pools: serve against a primary and a standby, as deployed.
        try await withTracker(db, environment: ["REPORT_DATABASE_URL": replicaURL]) { tracker in
            // Each ad: an impression, then a click on its main image 2 s later; ad 0's impression is sent twice
            // by two sources (a duplicate impression).
            var events: [[String: Any]] = []
            for ad in 0..<Self.ads {
                events.append(Wire.event(requestId: "replica-\(ad)", occurredAt: Wire.isoNow(offsetSeconds: -5)))
                events.append(Wire.event(type: "click", requestId: "replica-\(ad)", assetKey: "MainImage",
                                         occurredAt: Wire.isoNow(offsetSeconds: -3)))
            }
            events.append(Wire.event(requestId: "replica-0", occurredAt: Wire.isoNow(offsetSeconds: -4), extra: ["source": "sdk"]))
            let ingested = try await tracker.postEvents(Wire.batch(events), key: ingestKey)
            #expect(ingested.status == 200)
            #expect(ingested.json["accepted"] as? Int == events.count)
            let written = ContinuousClock.now

            let today = String(Wire.isoNow().prefix(10)), yesterday = String(Wire.isoNow(offsetSeconds: -86_400).prefix(10))
            let path = "/v1/reports/summary?from=\(yesterday)&to=\(today)"
            let auth = ["Authorization": "Bearer \(reportKey)"]
            let converged = try await eventually(within: .seconds(15)) { () -> [String: Int]? in
                let r = try await tracker.request("GET", path, headers: auth)
                guard r.status == 200 else { return nil }
                let totals = Self.totals(r.json["rows"] as? [[String: Any]] ?? [])
                return totals["impressions"] == Self.ads && totals["attributedClicks"] == Self.ads ? totals : nil
            }
            let lag = ContinuousClock.now - written
            let totals = try #require(converged, "the standby's report did not converge within 15 s")
            #expect(totals["impressions"] == Self.ads)
            #expect(totals["duplicateImpressions"] == 1)
            #expect(totals["clicks"] == Self.ads)
            #expect(totals["attributedClicks"] == Self.ads)
            print("replica report converged \(lag) after the ingest was acknowledged")

            // Proof that reports come from the standby and ingestion from the primary: without the
            // standby, reports fail while events are still accepted.
            try await TestEnvironment.postgres("stop", dir: standby.dir, port: standby.port)
            #expect(try await tracker.request("GET", path, headers: auth).status != 200)
            #expect(try await tracker.postEvents(Wire.batch([Wire.event(requestId: "replica-late")]), key: ingestKey).status == 200)
        }
        await db.drop()
    }

    static func totals(_ rows: [[String: Any]]) -> [String: Int] {
        var totals: [String: Int] = [:]
        for row in rows {
            for (name, value) in row {
                if let n = value as? Int { totals[name, default: 0] += n }
            }
        }
        return totals
    }
}

/// A PostgreSQL cluster of one test, in a folder of its own, on a loopback port.
struct PrivateCluster {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-cluster-\(UUID().uuidString)").path
    let port = freeLoopbackPort()

    func url(database: String) -> String { "postgresql://postgres@127.0.0.1:\(port)/\(database)" }

    /// A hot standby of `primary` made with pg_basebackup -R (streaming replication), then started.
    func cloneAsStandby(of primary: PrivateCluster) async throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let data = dir + "/data"
        let asRoot = getuid() == 0
        if asRoot { try await run("/bin/chown", ["postgres:postgres", dir]) }
        let bindir = "/usr/lib/postgresql/15/bin"
        let backup = [bindir + "/pg_basebackup", "-h", "127.0.0.1", "-p", String(primary.port), "-U", "postgres",
                      "-D", data, "-R", "-X", "stream", "-c", "fast"]
        if asRoot {
            try await run("/usr/sbin/runuser", ["-u", "postgres", "--"] + backup)
        } else {
            try await run(backup[0], Array(backup.dropFirst()))
        }
        // The copy carries the primary's port and socket folder: give the standby its own.
        let conf = try FileHandle(forWritingTo: URL(fileURLWithPath: data + "/postgresql.conf"))
        try conf.seekToEnd()
        try conf.write(contentsOf: Data("\nport = \(port)\nunix_socket_directories = '\(dir)'\nhot_standby = on\n".utf8))
        try conf.close()
        try await TestEnvironment.postgres("start", dir: dir, port: port)
    }

    func remove() async {
        try? await TestEnvironment.postgres("stop", dir: dir, port: port)
        try? FileManager.default.removeItem(atPath: dir)
    }

    private func run(_ executable: String, _ arguments: [String]) async throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-cluster-\(UUID().uuidString).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let status = try await Subprocess.run(executable, arguments, outputPath: log)
        let message = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        try #require(status == 0, "\(executable) failed: \(message)")
    }
}

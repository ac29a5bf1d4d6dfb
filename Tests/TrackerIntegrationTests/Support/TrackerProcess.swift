import Foundation
import Testing
import Tracker

/// `databaseURL` with each role's login for its setting (DATABASE_URL as tracker_ingest,
/// PROJECTOR_DATABASE_URL as tracker_projector, REPORT_DATABASE_URL as tracker_report), as
/// production connects; the test cluster trusts local logins, so no password is checked.
func leastPrivilegeLogins(_ databaseURL: String) -> [String: String] {
    Dictionary(uniqueKeysWithValues: DatabaseRole.allCases.map {
        ($0.setting, ConnectionString.replacingLogin(of: databaseURL, user: $0.rawValue, password: "trusted"))
    })
}

/// The real `tracker serve` binary, started on a free loopback port.
final class TrackerProcess: Sendable {
    let port: Int
    let process: Subprocess
    let output: URL

    /// `port` fixes the port, e.g. to restart a tracker where a load balancer expects it;
    /// `descriptorLimit` starts it with that soft and hard limit on open files (as a container's ulimit).
    /// With `leastPrivilege` (the default) the server connects as the roles `tracker migrate`
    /// creates (`leastPrivilegeLogins`). `environment` wins over both.
    init(databaseURL: String, port: Int? = nil, environment extra: [String: String] = [:],
         descriptorLimit: Int? = nil, leastPrivilege: Bool = true) async throws {
        let binary = try #require(TestEnvironment.binary, "run the integration tests through scripts/test.sh")
        let port = port ?? freeLoopbackPort()
        self.port = port
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = databaseURL
        env["PROJECTOR_DATABASE_URL"] = nil
        env["REPORT_DATABASE_URL"] = nil
        if leastPrivilege { env.merge(leastPrivilegeLogins(databaseURL)) { $1 } }
        env["TRACKER_LOG_LEVEL"] = "warning"
        for (k, v) in extra { env[k] = v }
        output = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-\(port).log")
        let serve = ["serve", "--host", "127.0.0.1", "--port", String(port)]
        if let descriptorLimit {
            process = try Subprocess("/bin/sh", ["-c", "ulimit -n \(descriptorLimit) && exec \"$0\" \"$@\"", binary] + serve,
                                     environment: env, outputPath: output.path)
        } else {
            process = try Subprocess(binary, serve, environment: env, outputPath: output.path)
        }
        try await waitUntilHealthy()
    }

    var client: HTTPClient { HTTPClient(port: port) }

    /// Waits up to 60 s: a debug binary on a loaded 2-core machine can take seconds to listen,
    /// and at the start of the whole suite a dozen suites start clusters and trackers at once
    /// (one run saw a tracker not listening after 30 s).
    func waitUntilHealthy() async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            // Healthy, and still this process: another tracker answering on the port would not do.
            if let r = try? await request("GET", "/healthz"), r.status == 200, process.isRunning { return }
            if !process.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let log = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        let state = process.isRunning ? "still running" : "exited with status \(await process.exitStatus())"
        Issue.record("tracker did not become healthy on port \(port) (\(state)):\n\(log)")
        process.signal(SIGKILL)
        throw CancellationError()
    }

    /// SIGTERM, then waits for the exit; returns the exit status (0 for a clean drain).
    @discardableResult
    func terminate() async -> Int32 {
        process.signal(SIGTERM)
        return await process.exitStatus()
    }

    func kill9() async {
        process.signal(SIGKILL)
        _ = await process.exitStatus()
    }

    deinit {
        if process.isRunning {
            kill(process.pid, SIGKILL)
            _ = process.waitBlocking()
        }
    }
}

extension TrackerProcess: TrackerHTTP {
    /// The blocking client runs on a thread of its own: on one of the test process's cooperative
    /// threads (two on this machine) it would hold it for the whole exchange, and the
    /// in-process trackers' handlers, writers and projectors run on those same threads.
    func send(_ method: String, _ path: String, headers: [String: String], body: Data?) async throws -> HTTPClient.Response {
        let client = self.client
        return try await onThreadOfItsOwn { try client.request(method, path, headers: headers, body: body) }
    }
}

/// Runs a tracker against `db` for the duration of `body`.
func withTracker(_ db: TestDatabase, environment: [String: String] = [:], descriptorLimit: Int? = nil,
                 _ body: (TrackerProcess) async throws -> Void) async throws {
    let tracker = try await TrackerProcess(databaseURL: db.url, environment: environment, descriptorLimit: descriptorLimit)
    do {
        try await body(tracker)
    } catch {
        await tracker.kill9()
        throw error
    }
    await tracker.kill9()
}

import Foundation
import Testing

/// The real `tracker serve` binary, started on a free loopback port.
final class TrackerProcess: @unchecked Sendable {
    // @unchecked: `process` is only touched from the test that owns this instance.
    let port: Int
    let process: Process
    let output: URL

    /// `port` fixes the port, e.g. to restart a tracker where a load balancer expects it.
    init(databaseURL: String, port: Int? = nil, environment extra: [String: String] = [:]) async throws {
        let binary = try #require(TestEnvironment.binary, "run the integration tests through scripts/test.sh")
        self.port = port ?? Int.random(in: 30_000..<60_000)
        process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--host", "127.0.0.1", "--port", String(self.port)]
        var env = ProcessInfo.processInfo.environment
        env["DATABASE_URL"] = databaseURL
        env["TRACKER_LOG_LEVEL"] = "warning"
        for (k, v) in extra { env[k] = v }
        process.environment = env
        output = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-\(self.port).log")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try await waitUntilHealthy()
    }

    var client: HTTPClient { HTTPClient(port: port) }

    func waitUntilHealthy() async throws {
        for _ in 0..<200 {
            if let r = try? client.request("GET", "/healthz"), r.status == 200 { return }
            if !process.isRunning { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        let log = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        Issue.record("tracker did not become healthy on port \(port):\n\(log)")
        throw CancellationError()
    }

    /// SIGTERM, then waits for a clean exit; returns the exit status.
    @discardableResult
    func terminate() -> Int32 {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    func kill9() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Runs a tracker against `db` for the duration of `body`.
func withTracker(_ db: TestDatabase, environment: [String: String] = [:], _ body: (TrackerProcess) async throws -> Void) async throws {
    let tracker = try await TrackerProcess(databaseURL: db.url, environment: environment)
    defer { tracker.kill9() }
    try await body(tracker)
}

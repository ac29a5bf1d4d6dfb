import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Tracker
@testable import TrackerServer

/// A tracker a test talks HTTP to, in this process (`InProcessTracker`) or as a spawned binary
/// (`TrackerProcess`): helpers that only send requests take either.
protocol TrackerHTTP: Sendable {
    /// Sends one request; the answer in the shape `HTTPClient` gives (header names in lower case).
    func send(_ method: String, _ path: String, headers: [String: String], body: Data?) async throws -> HTTPClient.Response
}

extension TrackerHTTP {
    func request(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) async throws -> HTTPClient.Response {
        try await send(method, path, headers: headers, body: body)
    }

    func postEvents(_ body: Data, key: String, headers extra: [String: String] = [:]) async throws -> HTTPClient.Response {
        var headers = ["Authorization": "Bearer \(key)", "Content-Type": "application/json"]
        for (k, v) in extra { headers[k] = v }
        return try await request("POST", "/v1/events", headers: headers, body: body)
    }
}

/// The tracker in this process over a test database, for tests of statuses, headers and bodies:
/// no binary to spawn, no socket. What needs a socket or a process (slow clients, the
/// connection guard's early answers, kill -9, SIGTERM, the request log on standard output)
/// uses `withTracker`.
struct InProcessTracker: TrackerHTTP {
    let client: any TestClientProtocol

    func send(_ method: String, _ path: String, headers: [String: String], body: Data?) async throws -> HTTPClient.Response {
        var fields = HTTPFields()
        for (name, value) in headers {
            guard let field = HTTPField.Name(name) else { throw TestFailure("not a header name: \(name)") }
            fields.append(HTTPField(name: field, value: value))
        }
        let buffer = body.map { ByteBuffer(bytes: $0) }
        return try await client.execute(uri: path, method: HTTPRequest.Method(method)!, headers: fields, body: buffer) { response in
            var headers: [String: String] = [:]
            for field in response.headers {
                let name = field.name.canonicalName
                headers[name] = headers[name].map { $0 + ", " + field.value } ?? field.value
            }
            return HTTPClient.Response(status: Int(response.status.code), headers: headers, body: Data(response.body.readableBytesView))
        }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` against a tracker on `db` assembled in this process exactly as `tracker serve`
/// assembles it (`ServeConfiguration` from `environment`, then `buildApplication`), with its
/// services running (the log's writers, the projector, the pools). `.router` (the default)
/// answers without a socket; `.live` serves on a loopback port through the real HTTP server
/// and connection guard. `environment` holds serve's settings (`TRACKER_…`); as with
/// `TrackerProcess`, the database logins are the least-privileged roles unless
/// `leastPrivilege` is false, and `/metrics` is off (the metrics system is bootstrapped once
/// per process, by the `tracker` binary).
func withInProcessTracker(_ db: TestDatabase, environment: [String: String] = [:], leastPrivilege: Bool = true,
                          mode: TestingSetup = .router,
                          _ body: @Sendable (InProcessTracker) async throws -> Void) async throws {
    var settings = ["DATABASE_URL": db.url, "TRACKER_METRICS": "off", "TRACKER_HOST": "127.0.0.1", "TRACKER_PORT": "0"]
    if leastPrivilege { settings.merge(leastPrivilegeLogins(db.url)) { $1 } }
    for (name, value) in environment { settings[name] = value }
    let configuration = try ServeConfiguration(settings: Settings(settings), descriptorLimit: 4096)
    var logger = Logger(label: "in-process-tracker")
    logger.logLevel = .warning
    let app = buildApplication(configuration, logger: logger)
    try await app.test(mode) { client in
        try await body(InProcessTracker(client: client))
    }
}

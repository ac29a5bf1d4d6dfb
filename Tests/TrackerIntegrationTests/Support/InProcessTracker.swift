import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Tracker
@testable import TrackerServer

/// The tracker's routes in this process over a test database (HummingbirdTesting's router
/// mode), for tests of statuses, headers and bodies: no binary to spawn, no socket. A
/// projector steps beside them, as inside `tracker serve`. What needs a socket or a process
/// (slow clients, the connection guard's early answers, kill -9, SIGTERM) uses `withTracker`.
struct InProcessTracker {
    let client: any TestClientProtocol

    /// Sends one request; the answer in the shape `HTTPClient` gives (header names in lower case).
    func request(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) async throws -> HTTPClient.Response {
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

    func postEvents(_ body: Data, key: String, headers extra: [String: String] = [:]) async throws -> HTTPClient.Response {
        var headers = ["Authorization": "Bearer \(key)", "Content-Type": "application/json"]
        for (k, v) in extra { headers[k] = v }
        return try await request("POST", "/v1/events", headers: headers, body: body)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` against the routes of a tracker on `db` with the server's default settings.
func withInProcessTracker(_ db: TestDatabase, _ body: @escaping @Sendable (InProcessTracker) async throws -> Void) async throws {
    let logger = Logger(label: "in-process-tracker")
    let pool = ConnectionPool(conninfo: db.url, maxConnections: 8, logger: logger)
    defer { pool.close() }
    let log = EventLog(pool: pool, logger: logger)
    let status = ProjectorStatus()
    let deps = ServerDependencies(
        pool: pool, keys: APIKeys(pool: pool), log: log, migrator: Migrator(logger: logger),
        reports: Reports(pool: pool), audit: AdAudit(pool: pool), rateLimiter: nil, maxConcurrentBatches: 256,
        bodyBudgetBytes: 256 << 20, chartLibraryPath: DashboardRoutes.defaultChartLibraryPath, beacons: nil,
        projectorStatus: status)
    // The services `tracker serve` runs beside its routes: the log's writers and a projector.
    let writing = Task { try? await log.run() }
    let projector = Projector(pool: pool, pollInterval: .milliseconds(20), status: status, logger: logger)
    let projecting = Task { try? await projector.run() }
    func stop() async {
        projecting.cancel()
        writing.cancel()
        await projecting.value
        await writing.value
    }
    do {
        try await Application(router: buildRouter(deps)).test(.router) { client in
            try await body(InProcessTracker(client: client))
        }
    } catch {
        await stop()
        throw error
    }
    await stop()
}

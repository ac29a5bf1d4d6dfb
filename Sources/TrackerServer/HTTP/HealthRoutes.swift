import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// `GET /healthz` (the process answers) and `GET /readyz` (database reachable, schema current).
struct HealthRoutes: Sendable {
    let pool: ConnectionPool
    let migrator: Migrator
    /// The in-process projector's state: a stopped projector makes the node not ready.
    var projectorStatus: ProjectorStatus? = nil

    func register(on router: Router<some RequestContext>) {
        router.get("/healthz") { _, _ in
            Self.json(.ok, "{\"status\":\"ok\"}")
        }
        router.get("/readyz") { _, _ in
            await readiness()
        }
    }

    func readiness() async -> Response {
        do {
            let pending = try await migrator.pending(pool)
            if !pending.isEmpty {
                return Self.json(.serviceUnavailable, "{\"status\":\"not_ready\",\"database\":\"ok\",\"migrations\":\"pending\",\"pendingVersions\":\(pending)}")
            }
            let lag = try await Projector.lag(pool)
            // A stopped projector is said, not made a 503: every node runs the same binary, so a
            // 503 would take ingestion (which still works) out of every balancer at once.
            if let stopped = projectorStatus?.stopReason {
                var body = "{\"status\":\"ready\",\"database\":\"ok\",\"migrations\":\"current\",\"projector\":\"stopped\",\"projectorError\":"
                JSONText.appendQuoted(stopped.description, to: &body)
                body += ",\"projectionLag\":{\"events\":\(lag.events),\"seconds\":\(lag.seconds)}}"
                return Self.json(.ok, body)
            }
            return Self.json(.ok, "{\"status\":\"ready\",\"database\":\"ok\",\"migrations\":\"current\",\"projectionLag\":{\"events\":\(lag.events),\"seconds\":\(lag.seconds)}}")
        } catch {
            return Self.json(.serviceUnavailable, "{\"status\":\"not_ready\",\"database\":\"unavailable\"}", retryAfter: true)
        }
    }

    static func json(_ status: HTTPResponse.Status, _ body: String, retryAfter: Bool = false) -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        if retryAfter { headers[.retryAfter] = "2" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization
import Tracker

/// `GET /healthz` (the process answers) and `GET /readyz` (database reachable, schema current).
struct HealthRoutes: Sendable {
    let pool: ConnectionPool
    let migrator: Migrator
    /// Where the projector's lag is read: a connection that may read the log (`ServerDependencies.lagPool`).
    let lagPool: ConnectionPool
    /// Where the readiness checks run, so that a probe waits for them at most its deadline.
    let errands: Errands<ContinuousClock>
    /// What the server's database roles may do that they should not, or must and may not.
    var roleWarnings: RoleWarnings? = nil
    /// The in-process projector's state: a stopped projector makes the node not ready.
    var projectorStatus: ProjectorStatus? = nil

    /// `GET /healthz`'s answer (also given by `QuickAnswers`, on the event loop).
    static let alive = "{\"status\":\"ok\"}"

    func register(on router: Router<some RequestContext>) {
        router.get("/healthz") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: Self.alive)))
        }
        router.get("/readyz") { _, _ in
            await readiness(within: .seconds(3))
        }
    }

    /// The readiness answer, or `503` once `deadline` passed: a frozen database (its processes
    /// stopped, a host that answers TCP but not queries) would otherwise hold the probe on a
    /// pooled connection for as long as it stays frozen.
    func readiness(within deadline: Duration) async -> Response {
        await errands.firstWithin(deadline) { await self.readiness() }
            ?? Self.json(.serviceUnavailable, Readiness.databaseUnavailable, retryAfter: true)
    }

    func readiness() async -> Response {
        do {
            let pending = try await migrator.pending(pool)
            if !pending.isEmpty {
                return Self.json(.serviceUnavailable, Readiness(status: "not_ready", database: "ok", migrations: "pending", pendingVersions: pending))
            }
            var ready = Readiness(status: "ready", database: "ok", migrations: "current")
            // A node whose connections may not read the log (DATABASE_URL as tracker_ingest, the
            // projector elsewhere, no REPORT_DATABASE_URL) is still ready: it ingests. Its lag is
            // left out, and the role check's warning says which setting to add.
            do {
                let lag = try await LogCursor(pool: lagPool).lag()
                ready.projectionLag = Readiness.Lag(events: lag.events, seconds: lag.seconds)
                let rules = try await IVTRuleSets(pool: lagPool).versions()
                ready.ivtRules = Readiness.Rules(projections: rules.projections, newest: rules.newest)
                if rules.newest > rules.projections {
                    ready.warnings = ["invalid-traffic rule set \(rules.newest) waits: the projections use \(rules.projections) "
                                      + "until 'tracker rebuild' applies the newest to the whole log"]
                }
            } catch let error as DatabaseError where error.state == .insufficientPrivilege {}
            if let warnings = roleWarnings?.current, !warnings.isEmpty { ready.warnings = (ready.warnings ?? []) + warnings }
            // A stopped projector is said, not made a 503: every node runs the same binary, so a
            // 503 would take ingestion (which still works) out of every balancer at once.
            if let stopped = projectorStatus?.stopReason {
                ready.projector = "stopped"
                ready.projectorError = stopped.description
            }
            return Self.json(.ok, ready)
        } catch {
            return Self.json(.serviceUnavailable, Readiness.databaseUnavailable, retryAfter: true)
        }
    }

    static func json(_ status: HTTPResponse.Status, _ readiness: Readiness, retryAfter: Bool = false) -> Response {
        JSONBody.response(readiness, status: status, headers: retryAfter ? [.retryAfter: "2"] : [:])
    }
}

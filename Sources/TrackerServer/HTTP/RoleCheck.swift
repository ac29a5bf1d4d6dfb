import Logging
import ServiceLifecycle
import Synchronization
import Tracker

/// What the roles `tracker serve` connects as may do that they should not (a superuser, the
/// log's owner) or may not do that they must: found once at start, logged as warnings, and
/// shown by `/readyz` for as long as the process runs.
final class RoleWarnings: Sendable {
    private let found = Mutex<[String]>([])

    var current: [String] { found.withLock { $0 } }

    func set(_ warnings: [String]) { found.withLock { $0 = warnings } }
}

/// Checks each connection of the server against the role whose work it does
/// (`DatabaseRole.warnings`). Retries until the database answers or the server shuts down;
/// a check still waiting for the database never holds the shutdown.
struct RoleCheck: Service {
    struct Use: Sendable {
        var role: DatabaseRole
        /// The setting the connection came from (`DATABASE_URL` when the role's own is unset).
        var setting: String
        var pool: ConnectionPool
    }

    let uses: [Use]
    let warnings: RoleWarnings
    let logger: Logger

    func run() async throws {
        // The check runs in a task of its own, not under this service: opening a connection
        // cannot be interrupted (libpq resolves the host name and connects in one blocking
        // call, and a DNS server that drops the query holds it for the resolver's timeouts,
        // 5 s per server and try), and a check still opening one must not hold the server's
        // exit. What it finds only matters while the server runs.
        let check = Task { await self.check() }
        try? await gracefulShutdown()
        check.cancel()
    }

    /// Retried while the database is down, until it answers or the task is cancelled.
    private func check() async {
        var delay = Duration.seconds(1)
        while !Task.isCancelled {
            do {
                var found: [(use: Use, finding: RoleFinding)] = []
                for use in uses {
                    found += try await use.pool.withConnection { try use.role.findings(on: $0) }.map { (use, $0) }
                }
                let messages = Self.messages(found)
                warnings.set(messages)
                for message in messages { logger.warning("\(message)") }
                return
            } catch {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(30))
            }
        }
    }

    /// One message per finding, except that a connection too strong for several kinds of work
    /// (DATABASE_URL as a superuser, say) gets one naming every role to split it into.
    static func messages(_ found: [(use: Use, finding: RoleFinding)]) -> [String] {
        // Strength is told once per setting and finding; a missing grant once per role.
        struct Group: Hashable {
            var setting: String
            var finding: RoleFinding
            var role: DatabaseRole?
        }
        var order: [Group] = []
        var roles: [Group: [DatabaseRole]] = [:]
        for (use, finding) in found {
            let perRole: Bool
            if case .missing = finding.problem { perRole = true } else { perRole = false }
            let group = Group(setting: use.setting, finding: finding, role: perRole ? use.role : nil)
            if roles[group] == nil { order.append(group) }
            roles[group, default: []].append(use.role)
        }
        return order.map { $0.finding.message(setting: $0.setting, roles: roles[$0] ?? []) }
    }
}

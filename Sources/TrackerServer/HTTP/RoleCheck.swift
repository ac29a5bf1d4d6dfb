import Foundation
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
/// (`DatabaseRole.warnings`). Retries until the database answers, then waits for the shutdown.
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
        var delay = Duration.seconds(1)
        while !Task.isCancelled {
            do {
                var raw: [(warning: String, role: DatabaseRole)] = []
                for use in uses {
                    let more = try await use.pool.withConnection { try use.role.warnings(on: $0, via: use.setting) }
                    raw += more.map { ($0, use.role) }
                }
                let found = Self.merged(raw)
                warnings.set(found)
                for warning in found { logger.warning("\(warning)") }
                break
            } catch {
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(30))
            }
        }
        // A service that returns ends the whole server: this one waits for the shutdown.
        try? await gracefulShutdown()
    }

    /// One connection doing several roles' work (DATABASE_URL as a superuser, say) gets one
    /// warning that names every role it should be split into, not one warning per role.
    static func merged(_ found: [(warning: String, role: DatabaseRole)]) -> [String] {
        var order: [String] = []
        var roles: [String: [DatabaseRole]] = [:]
        for (warning, role) in found {
            let head = warning.components(separatedBy: "; connect as ").first ?? warning
            if roles[head] == nil { order.append(head) }
            roles[head, default: []].append(role)
        }
        return order.map { head in
            let named = roles[head] ?? []
            guard head.hasSuffix("whatever its protections say"), let first = named.first else {
                return found.first { $0.warning.hasPrefix(head) }?.warning ?? head
            }
            let others = named.dropFirst().map { "\($0.setting) as \($0.rawValue)" }
            return head + "; connect as \(first.rawValue)" + (others.isEmpty ? "" : ", with " + others.joined(separator: " and "))
                + " (docs/OPERATIONS.md, \"Database roles\")"
        }
    }
}

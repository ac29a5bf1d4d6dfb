import ArgumentParser
import Tracker

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Create, list and revoke API keys (stored only as SHA-256 hashes).",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a key; the key alone is printed as the last line of stdout, and only this once.")

        @Option(help: "A unique name: 1 to 64 letters, digits, '.', '_' or '-'. Stored with every event sent with the key.")
        var name: String

        @Option(help: "ingest (POST /v1/events) or report (GET /v1/reports/…).")
        var scope: KeyScope

        @Flag(help: """
            An ingest key for a server that sends events on devices' behalf: its events may carry the device's \
            userAgent and ip (any other key's event that sets them is rejected).
            """)
        var server = false

        @Option(help: """
            Scope the key to these Ad Manager networks (comma-separated network codes, e.g. 6499,21775744923): \
            it sends events and reads reports of their ad units only. Without it the key serves every network.
            """)
        var networks: String?

        @OptionGroup var database: DatabaseOptions

        func validate() throws {
            if server, scope != .ingest { throw ValidationError("--server applies to ingest keys only (--scope ingest)") }
            if let networks {
                do { _ = try NetworkScope.parse(networks) } catch { throw ValidationError("invalid --networks: \(error)") }
            }
        }

        func run() async throws {
            let scoped = try networks.map { try NetworkScope.parse($0) }
            let pool = try database.pool()
            defer { pool.close() }
            do {
                let key = try await APIKeys(pool: pool).create(name: name, scope: scope, server: server, networks: scoped)
                print("created \(scope.rawValue)\(server ? " server" : "") key '\(name)'" + (scoped.map { " for networks \($0)" } ?? ""))
                print(key)
            } catch APIKeyError.invalidName {
                throw ValidationError("invalid --name: \(APIKeys.nameRule)")
            } catch let error as APIKeyError {
                throw CommandFailure("\(error)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List keys: name, scope (server keys: ingest+server), networks (all: unscoped), prefix, created, revoked.")

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let pool = try database.pool()
            defer { pool.close() }
            let keys = try await APIKeys(pool: pool).list()
            let rows = [["NAME", "SCOPE", "NETWORKS", "PREFIX", "CREATED", "REVOKED"]]
                + keys.map { [$0.name, $0.scope.rawValue + ($0.server ? "+server" : ""), $0.networks?.description ?? "all", $0.prefix + "…",
                              $0.createdAt, $0.revokedAt ?? "-"] }
            print(TextTable.render(rows), terminator: "")
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key by name; it stops working within seconds.")

        @Option(help: "The name of the key to revoke.")
        var name: String

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let pool = try database.pool()
            defer { pool.close() }
            do {
                try await APIKeys(pool: pool).revoke(name: name)
                print("revoked key '\(name)'")
            } catch let error as APIKeyError {
                throw CommandFailure("\(error)")
            }
        }
    }
}

extension KeyScope: ExpressibleByArgument {}

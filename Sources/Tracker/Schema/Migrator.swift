import Logging

/// One numbered SQL file of `sql/`, embedded in the binary.
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

extension Migration {
    /// The file's statements, split at each `;` that ends a line outside a `$$` body.
    var statements: [String] {
        var out: [String] = []
        var current = ""
        var inBody = false
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            current += line + "\n"
            let bytes = Array(line.utf8)
            let dollars = bytes.indices.dropLast().filter { bytes[$0] == UInt8(ascii: "$") && bytes[$0 + 1] == UInt8(ascii: "$") }.count
            if dollars % 2 == 1 { inBody.toggle() }
            if !inBody, bytes.last(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }) == UInt8(ascii: ";") {
                out.append(current)
                current = ""
            }
        }
        if current.utf8.contains(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: "\t") }) { out.append(current) }
        return out
    }
}

/// Applies the migrations a database lacks, once, even when several processes start together.
public struct Migrator: Sendable {
    public let migrations: [Migration]
    private let logger: Logger
    private let report: @Sendable (String) -> Void

    /// `report` is told each step of a distribution over Citus as it is done.
    public init(migrations: [Migration] = Migration.all, logger: Logger, report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.logger = logger
        self.report = report
    }

    /// A session-level advisory lock serialises migrators; each migration commits with its record.
    public func migrate(_ pool: ConnectionPool) async throws -> [Migration] {
        let (migrations, logger, report) = (self.migrations, self.logger, self.report)
        return try await pool.withConnection { connection in
            try connection.lock("tracker.migrations")
            defer { try? connection.unlock("tracker.migrations") }
            try connection.execute(Self.createTable)
            let applied = try Self.appliedChecksums(connection)
            var done: [Migration] = []
            for migration in migrations {
                if let checksum = applied[migration.version] {
                    let current = try connection.query("SELECT md5($1)", [migration.sql]).string(0, 0)
                    if checksum != current {
                        logger.warning("migration was edited after it was applied", metadata: [
                            "tracker.migration.version": "\(migration.version)",
                            "tracker.migration.name": "\(migration.name)",
                        ])
                    }
                    continue
                }
                try connection.transaction {
                    try connection.execute(migration.sql)
                    try connection.query(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1::int, $2, md5($3))",
                        [String(migration.version), migration.name, migration.sql])
                }
                logger.info("applied migration", metadata: [
                    "tracker.migration.version": "\(migration.version)",
                    "tracker.migration.name": "\(migration.name)",
                ])
                done.append(migration)
            }
            // The log onto the Citus workers, when the database has the extension and workers
            // (docs/SCALING.md, "Citus"): empty or not, in steps a rerun continues.
            if try CitusDistribution(connection: connection, logger: logger, report: report).run() { done.append(Migration.citusLayout) }
            return done
        }
    }

    /// Versions not yet applied; empty means the schema is current.
    public func pending(_ pool: ConnectionPool) async throws -> [Int] {
        let versions = migrations.map(\.version)
        return try await pool.withConnection { connection in
            let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL").bool(0, 0) ?? false
            guard exists else { return versions }
            let applied = try Self.appliedChecksums(connection)
            return versions.filter { applied[$0] == nil }
        }
    }

    private static let createTable = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version    integer     PRIMARY KEY,
            name       text        NOT NULL,
            checksum   text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )
        """

    private static func appliedChecksums(_ connection: Connection) throws -> [Int: String] {
        let result = try connection.query("SELECT version, checksum FROM schema_migrations")
        var out: [Int: String] = [:]
        for row in 0..<result.rowCount {
            if let v = result.int64(row, 0) { out[Int(v)] = result.string(row, 1) }
        }
        return out
    }
}

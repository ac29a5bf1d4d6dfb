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

    public init(migrations: [Migration] = Migration.all, logger: Logger) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.logger = logger
    }

    /// A session-level advisory lock serialises migrators; each migration commits with its record.
    public func migrate(_ pool: ConnectionPool) async throws -> [Migration] {
        let migrations = self.migrations
        let logger = self.logger
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
            if try Self.distributeOnCitus(connection, logger: logger) { done.append(Migration.citusLayout) }
            return done
        }
    }

    /// Applies the Citus layout (`sql/citus/distribute.sql`) when the database has the citus
    /// extension, workers to put shards on, and an empty log not yet distributed. A log that
    /// already holds events stays where it is (on the coordinator, which works as a single node):
    /// distributing it would need every row stamped again in its worker's order.
    static func distributeOnCitus(_ connection: Connection, logger: Logger) throws -> Bool {
        let state = try connection.query(MigratorSQL.citusState)
        guard state.bool(0, 0) == true, state.bool(0, 1) == false else { return false }
        guard state.bool(0, 2) == true else {
            logger.warning("the citus extension is installed but the log already holds events: it stays on the coordinator (docs/SCALING.md, \"Citus\")")
            return false
        }
        let workers = try connection.query(MigratorSQL.citusWorkers).int64(0, 0) ?? 0
        guard workers > 0 else {
            logger.warning("the citus extension is installed but no worker takes shards: the log stays on the coordinator; add workers (citus_add_node) and run tracker migrate again")
            return false
        }
        // One statement at a time: Citus parses the query string again when it passes some
        // commands on to the workers, and refuses a string that holds several.
        try connection.transaction {
            for statement in Migration.citusLayout.statements { try connection.execute(statement) }
        }
        logger.info("distributed the log over the Citus cluster", metadata: ["tracker.citus.workers": "\(workers)"])
        return true
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

enum MigratorSQL {
    /// Columns: 0 the citus extension is installed, 1 the Citus layout is applied, 2 the log is empty.
    static let citusState = """
        SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus'), to_regclass('log_shards') IS NOT NULL,
               NOT EXISTS (SELECT 1 FROM events)
        """

    /// Active nodes that take shards (the workers; a coordinator can be one too).
    static let citusWorkers = "SELECT count(*) FROM pg_dist_node WHERE isactive AND shouldhaveshards AND noderole = 'primary'"
}

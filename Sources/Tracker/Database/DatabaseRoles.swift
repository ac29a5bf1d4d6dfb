/// The least-privilege roles `tracker migrate` creates (sql/008_roles.sql), and a check of what
/// the role a connection logged in as may do.
public enum DatabaseRole: String, Sendable, CaseIterable {
    /// Appends to the log, reads keys, makes the log's partitions (through a function).
    case ingest = "tracker_ingest"
    /// Reads the log, writes the projections, drops old partitions (through a function).
    case projector = "tracker_projector"
    /// Reads the projections, and the log for an ad's audit trail.
    case report = "tracker_report"

    /// The environment variable that carries this role's connection for `tracker serve`.
    public var setting: String {
        switch self {
        case .ingest: "DATABASE_URL"
        case .projector: "PROJECTOR_DATABASE_URL"
        case .report: "REPORT_DATABASE_URL"
        }
    }

    /// What a connection used for this role's work can do, as warnings for the operator: empty
    /// when the login is exactly as strong as it needs to be. A superuser or a member of the
    /// log's owner can update, delete or detach the log whatever its triggers say; a role missing
    /// a grant will fail at its first request.
    /// `setting` names where the connection came from (`DATABASE_URL` when the role's own
    /// setting is not set and the main connection does its work).
    public func warnings(on connection: Connection, via setting: String? = nil) throws -> [String] {
        let setting = setting ?? self.setting
        let r = try connection.query(Self.privileges)
        guard r.rowCount == 1, let user = r.string(0, 0) else { return [] }
        var warnings: [String] = []
        if r.bool(0, 1) == true {
            warnings.append("\(setting) connects as \(user), a superuser: it can update, delete and detach the log whatever its protections say; connect as \(rawValue) (docs/OPERATIONS.md, \"Database roles\")")
        } else if r.bool(0, 2) == true {
            warnings.append("\(setting) connects as \(user), which owns the log: it can update, delete and detach the log whatever its protections say; connect as \(rawValue) (docs/OPERATIONS.md, \"Database roles\")")
        }
        let needed: [(column: Int, what: String)] = switch self {
        case .ingest: [(3, "append to the log (INSERT on events)"), (4, "read keys (SELECT on api_keys)"),
                       (5, "create the log's daily partitions (EXECUTE tracker_ensure_event_partitions)")]
        case .projector: [(6, "read the log (SELECT on events)"), (7, "write the projections (UPDATE on format_day)")]
        case .report: [(8, "read the projections (SELECT on format_day)"), (6, "read the log (SELECT on events)")]
        }
        for (column, what) in needed where r.bool(0, column) == false {
            warnings.append("\(setting) connects as \(user), which may not \(what): that work will fail; grant \(rawValue) to it or connect as \(rawValue)")
        }
        return warnings
    }

    /// Sets this role's password: only its SCRAM-SHA-256 verifier, computed by libpq, is sent
    /// (`Connection.scramVerifier`), so neither the statement log nor `pg_stat_activity` ever
    /// holds the password. Needs a superuser or a role with CREATEROLE.
    public func setPassword(_ password: String, on connection: Connection) throws {
        let verifier = try connection.scramVerifier(password: password, role: rawValue)
        // The verifier is base64 and '$', ':' and digits; refuse anything that could end the literal.
        guard verifier.hasPrefix("SCRAM-SHA-256$"), !verifier.contains("'"), !verifier.contains("\\") else {
            throw DatabaseError(.unexpectedResult, serverMessage: "libpq returned a password verifier of an unexpected form")
        }
        try connection.execute("ALTER ROLE \(rawValue) PASSWORD '\(verifier)'")
    }

    /// A new password: 32 random bytes, base64url (43 characters, safe in URLs and env files).
    public static func generatePassword() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    static let privileges = """
        SELECT current_user::text,
               r.rolsuper,
               pg_has_role(current_user, c.relowner, 'MEMBER'),
               has_any_column_privilege('events', 'INSERT'),
               has_column_privilege('api_keys', 'key_hash', 'SELECT'),
               has_function_privilege('tracker_ensure_event_partitions(date, date)', 'EXECUTE'),
               has_table_privilege('events', 'SELECT'),
               has_table_privilege('format_day', 'UPDATE'),
               has_table_privilege('format_day', 'SELECT')
        FROM pg_roles r, pg_class c
        WHERE r.rolname = current_user AND c.oid = 'events'::regclass
        """
}

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

    /// The work's name (`ingest`, `projector`, `report`).
    public var work: String { String(rawValue.dropFirst("tracker_".count)) }

    /// The environment variable `tracker roles passwords` reads this role's password from.
    public var passwordSetting: String { "TRACKER_\(work.uppercased())_PASSWORD" }

    /// What this role's work needs of a connection: a test PostgreSQL answers for the logged-in
    /// role, and what fails without it.
    var needs: [(test: String, what: String)] {
        switch self {
        case .ingest: [("has_any_column_privilege('events', 'INSERT')", "append to the log (INSERT on events)"),
                       ("has_column_privilege('api_keys', 'key_hash', 'SELECT')", "read keys (SELECT on api_keys)"),
                       ("has_function_privilege('tracker_ensure_event_partitions(date, date)', 'EXECUTE')",
                        "create the log's daily partitions (EXECUTE tracker_ensure_event_partitions)"),
                       ("to_regprocedure('tracker_mark_append()') IS NULL OR has_function_privilege('tracker_mark_append()', 'EXECUTE')",
                        "mark its appends (EXECUTE tracker_mark_append)")]
        case .projector: [("has_table_privilege('events', 'SELECT')", "read the log (SELECT on events)"),
                          ("has_table_privilege('format_day', 'UPDATE')", "write the projections (UPDATE on format_day)")]
        case .report: [("has_table_privilege('format_day', 'SELECT')", "read the projections (SELECT on format_day)"),
                       ("has_table_privilege('events', 'SELECT')", "read the log (SELECT on events)")]
        }
    }

    /// What the role `connection` logged in as may do that this role's work must not (a
    /// superuser or a member of the log's owner can update, delete or detach the log whatever
    /// its triggers say), or must and may not (that work fails at its first request). Empty
    /// when the login is exactly as strong as the work needs.
    public func findings(on connection: Connection) throws -> [RoleFinding] {
        let needs = self.needs
        let r = try connection.query("""
            SELECT current_user::text, r.rolsuper, pg_has_role(current_user, c.relowner, 'MEMBER'),
                   \(needs.map(\.test).joined(separator: ", "))
            FROM pg_roles r, pg_class c
            WHERE r.rolname = current_user AND c.oid = 'events'::regclass
            """)
        guard r.rowCount == 1, let user = r.string(0, 0) else { return [] }
        var findings: [RoleFinding] = []
        if r.bool(0, 1) == true {
            findings.append(RoleFinding(user: user, problem: .superuser))
        } else if r.bool(0, 2) == true {
            findings.append(RoleFinding(user: user, problem: .owner))
        }
        for (column, need) in needs.enumerated() where r.bool(0, 3 + column) == false {
            findings.append(RoleFinding(user: user, problem: .missing(need.what)))
        }
        return findings
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
}

/// Something the role a connection logged in as may do that its work must not, or must and may not.
public struct RoleFinding: Sendable, Hashable {
    public enum Problem: Sendable, Hashable {
        /// A superuser: it can switch the log's triggers off.
        case superuser
        /// A member of the log's owner: it can disable the triggers or detach partitions.
        case owner
        /// A grant the work needs is missing: what fails without it.
        case missing(String)
    }

    public var user: String
    public var problem: Problem

    /// The warning for an operator: `setting` is where the connection came from, `roles` the
    /// work it does (a connection too strong for several kinds of work is named once, with the
    /// settings to split it into).
    public func message(setting: String, roles: [DatabaseRole]) -> String {
        let role = roles.first ?? .ingest
        let strength: String
        switch problem {
        case .missing(let what):
            return "\(setting) connects as \(user), which may not \(what): that work will fail; grant \(role.rawValue) to it or connect as \(role.rawValue)"
        case .superuser: strength = "a superuser"
        case .owner: strength = "which owns the log"
        }
        let others = roles.dropFirst().map { "\($0.setting) as \($0.rawValue)" }
        return "\(setting) connects as \(user), \(strength): it can update, delete and detach the log whatever its protections say; "
            + "connect as \(role.rawValue)" + (others.isEmpty ? "" : ", with " + others.joined(separator: " and "))
            + " (docs/OPERATIONS.md, \"Database roles\")"
    }
}

import Logging

/// A stored rule set: its version and its rules.
public struct VersionedRuleSet: Sendable, Equatable {
    public var version: Int
    public var ruleSet: IVTRuleSet
    /// When and by whom it was activated (`tracker ivt show`).
    public var activatedAt: String
    public var activatedBy: String
}

/// The invalid-traffic rule sets of a database (`ivt_rule_sets`): version 0 is the empty rule
/// set; `tracker ivt activate` adds the next version, which `tracker rebuild` then applies to the
/// whole log and every projector after it to new events.
public struct IVTRuleSets: Sendable {
    private let pool: ConnectionPool

    public init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// Stores `ruleSet` with the next version number and returns that number.
    public func activate(_ ruleSet: IVTRuleSet) async throws -> Int {
        try await pool.withConnection { connection in
            try connection.transaction {
                // Two activations at once get consecutive numbers, not the same one.
                try connection.execute("LOCK TABLE ivt_rule_sets IN EXCLUSIVE MODE")
                let r = try connection.query(IVTRuleSQL.activate, [ruleSet.name, ruleSet.storedDocument])
                guard let version = r.int64(0, 0) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "ivt_rule_sets: no version returned")
                }
                return Int(version)
            }
        }
    }

    /// The rule set the projections were computed with, and the newest one: when the newest
    /// is greater it waits for `tracker rebuild`, unless the projections hold no event yet
    /// (`projectionsEmpty`): then the projector takes the newest at its next step
    /// (`Projector.lockState`).
    public func versions() async throws -> (projections: Int, newest: Int, projectionsEmpty: Bool) {
        try await pool.withConnection { connection in
            let r = try connection.query("""
                SELECT ivt_rules, (SELECT max(version) FROM ivt_rule_sets), events_projected = 0 FROM projection_state
                """)
            return (Int(r.int64(0, 0) ?? 0), Int(r.int64(0, 1) ?? 0), r.bool(0, 2) ?? false)
        }
    }

    /// The newest rule set (the one a rebuild applies).
    public func newest() async throws -> VersionedRuleSet {
        try await pool.withConnection { connection in
            try Self.load(version: nil, on: connection)
        }
    }

    /// The rule set `version`, or the newest when `version` is `nil`.
    static func load(version: Int?, on connection: Connection) throws -> VersionedRuleSet {
        let r = try connection.query(IVTRuleSQL.load, [version.map(String.init)])
        guard r.rowCount == 1, let number = r.int64(0, 0) else {
            throw DatabaseError(.unexpectedResult,
                                serverMessage: "ivt_rule_sets has no version \(version.map(String.init) ?? "at all") (run tracker migrate)")
        }
        let ruleSet: IVTRuleSet
        if number == 0 {
            ruleSet = .empty
        } else {
            do {
                ruleSet = try IVTRuleSet.parseStored(Array((r.string(0, 1) ?? "").utf8))
            } catch {
                throw ProjectorError.unreadableRuleSet(version: Int(number), reason: "\(error)")
            }
        }
        return VersionedRuleSet(version: Int(number), ruleSet: ruleSet, activatedAt: r.string(0, 2) ?? "",
                                activatedBy: r.string(0, 3) ?? "")
    }

    /// The newest version's number.
    static func newestVersion(on connection: Connection) throws -> Int {
        Int(try connection.query("SELECT max(version) FROM ivt_rule_sets").int64(0, 0) ?? 0)
    }
}

enum IVTRuleSQL {
    static let activate = """
        INSERT INTO ivt_rule_sets (version, name, document)
        SELECT COALESCE(max(version), 0) + 1, $1, $2 FROM ivt_rule_sets
        RETURNING version
        """

    /// Columns: 0 version, 1 document, 2 activated at (UTC, RFC 3339), 3 activated by.
    static let load = """
        SELECT version, document, to_char(activated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), activated_by
        FROM ivt_rule_sets
        WHERE version = COALESCE($1::int, (SELECT max(version) FROM ivt_rule_sets))
        """
}

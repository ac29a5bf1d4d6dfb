/// A failure talking to PostgreSQL.
///
/// `description` is safe to show a client: it never contains SQL or server text.
/// The server's message and SQLSTATE are kept for logs in `debugDescription`.
public struct DatabaseError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// A stable classification callers can switch over.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        /// The server could not be reached or the connection broke.
        public static let unavailable = Code(name: "unavailable")
        /// A statement failed on the server (see `sqlState`).
        public static let queryFailed = Code(name: "queryFailed")
        /// No connection became free in time.
        public static let poolExhausted = Code(name: "poolExhausted")
        /// The pool is shutting down.
        public static let poolClosed = Code(name: "poolClosed")
        /// The connection string could not be understood.
        public static let invalidConfiguration = Code(name: "invalidConfiguration")
        /// A result did not have the shape the caller expected.
        public static let unexpectedResult = Code(name: "unexpectedResult")
        public var description: String { name }
    }

    public var code: Code
    /// The five-character SQLSTATE, when the server sent one.
    public var sqlState: String?
    /// The server's or libpq's message; for logs only.
    public var serverMessage: String
    /// The constraint the statement broke, when the server named one (e.g. the unique index of
    /// a 23505).
    public var constraint: String?

    public init(_ code: Code, sqlState: String? = nil, serverMessage: String, constraint: String? = nil) {
        self.code = code
        self.sqlState = sqlState
        self.serverMessage = serverMessage
        self.constraint = constraint
    }

    /// True when retrying on a fresh connection may succeed (server down, restarting, overloaded).
    public var isTransient: Bool {
        if code == .unavailable || code == .poolExhausted { return true }
        guard let state = sqlState else { return false }
        // 08: connection exception; 57P01..57P03: admin shutdown, crash shutdown, cannot connect now;
        // 53: insufficient resources; 40001/40P01: serialization failure / deadlock;
        // 25006: read-only transaction (the server is, or became in a failover, a standby);
        // 57014: statement cancelled (statement_timeout, an operator's pg_cancel_backend);
        // 55P03: lock timeout.
        return state.hasPrefix("08") || state.hasPrefix("57P") || state.hasPrefix("53")
            || [SQLState.serializationFailure, .deadlockDetected, .readOnlySQLTransaction, .queryCanceled, .lockNotAvailable]
                .contains(SQLState(rawValue: state))
    }

    /// True when the connection reached a server that cannot take writes: a fresh connection
    /// may reach the new primary (multi-host conninfo with `target_session_attrs=read-write`,
    /// or a name that moved in a failover).
    public var isReadOnlyServer: Bool { state == .readOnlySQLTransaction }

    public var description: String {
        "database error: \(code)" + (sqlState.map { " (SQLSTATE \($0))" } ?? "")
    }

    public var debugDescription: String {
        description + ": " + serverMessage
    }
}

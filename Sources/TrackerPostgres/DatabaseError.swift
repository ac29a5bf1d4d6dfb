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
    /// The server's source file that raised the error (`remote_commands.c`), when it sent one:
    /// what tells Citus's relayed worker failures apart from other XX000s, whatever the
    /// server's language.
    public var sourceFile: String?

    public init(_ code: Code, sqlState: String? = nil, serverMessage: String, constraint: String? = nil, sourceFile: String? = nil) {
        self.code = code
        self.sqlState = sqlState
        self.serverMessage = serverMessage
        self.constraint = constraint
        self.sourceFile = sourceFile
    }

    /// What a failure that a later retry may not meet means.
    public enum Transience: Sendable, Hashable, CustomStringConvertible {
        /// The connection to the server broke or could not be made.
        case connectionLost
        /// The server is shutting down, restarting after a crash, or not accepting connections yet.
        case serverRestarting
        /// The server is short of connections, memory or disk, or no pooled connection became free in time.
        case overloaded
        /// The transaction lost to a concurrent one: a serialization failure, a deadlock, a lock
        /// not granted in time.
        case contention
        /// The statement was cancelled (`statement_timeout`, an operator's `pg_cancel_backend`).
        case cancelled
        /// The server takes no writes: a standby, or a primary that became one in a failover.
        case readOnlyServer
        /// A read or write outside the server's own logic failed: its disk, or Citus's COPY
        /// stream to a worker.
        case ioFailed
        /// Citus lost a worker in the middle of a statement (the worker stopping, restarting,
        /// or unreachable), and relayed it with its default code, XX000.
        case workerUnreachable

        public var description: String {
            switch self {
            case .connectionLost: "connection lost"
            case .serverRestarting: "server restarting"
            case .overloaded: "server overloaded"
            case .contention: "lost to a concurrent transaction"
            case .cancelled: "statement cancelled"
            case .readOnlyServer: "server is read-only"
            case .ioFailed: "I/O failed"
            case .workerUnreachable: "a Citus worker is unreachable"
            }
        }
    }

    /// The files of Citus that run statements, transactions and COPYs on the workers'
    /// connections. An XX000 raised there is a failure of a worker or of the connection to it,
    /// relayed without a SQLSTATE: libpq's `server closed the connection unexpectedly` or
    /// `SSL SYSCALL error` with `while executing command on host:port` (remote_commands.c); a
    /// connection the transaction cannot do without (`failure on connection marked as
    /// essential`) or a `PREPARE TRANSACTION` that failed (remote_transaction.c); a worker's
    /// own error in the middle of a COPY, such as `terminating connection due to administrator
    /// command` (multi_copy.c); an intermediate result a worker could not send
    /// (intermediate_results.c). A COPY's relayed error may also be a worker's unique
    /// violation: the log's plain append checks for that first (`EventLogSQL.metStoredId` sends
    /// any XX000 to the conflict-checking statement); the tracker's other statements reach the
    /// workers with values the coordinator has already parsed and routed.
    static let citusWorkerFiles: Set<String> = ["remote_commands.c", "remote_transaction.c", "multi_copy.c", "intermediate_results.c"]

    /// Why retrying on a fresh connection may succeed; `nil` when the statement, its data or
    /// the database's state is at fault, or the server did not say what failed.
    ///
    /// Nothing of a statement that failed with any of these is committed: the server rolled
    /// its transaction back (a connection lost during `COMMIT` leaves it unknown, which a
    /// client's retry with the same ids settles).
    public var transience: Transience? {
        switch code {
        case .unavailable: return .connectionLost
        case .poolExhausted: return .overloaded
        default: break
        }
        guard let state else { return nil }
        switch state.errorClass {
        case SQLState.connectionException: return .connectionLost
        case SQLState.insufficientResources: return .overloaded
        default: break
        }
        switch state {
        case .adminShutdown, .crashShutdown, .cannotConnectNow: return .serverRestarting
        case .idleSessionTimeout: return .connectionLost
        case .serializationFailure, .deadlockDetected, .lockNotAvailable: return .contention
        case .queryCanceled: return .cancelled
        case .readOnlySQLTransaction: return .readOnlyServer
        case .ioError: return .ioFailed
        case .internalError:
            return sourceFile.map(Self.citusWorkerFiles.contains) == true ? .workerUnreachable : nil
        default: return nil
        }
    }

    /// True when retrying on a fresh connection may succeed (`transience` says why).
    public var isTransient: Bool { transience != nil }

    /// True when the connection reached a server that cannot take writes: a fresh connection
    /// may reach the new primary (multi-host conninfo with `target_session_attrs=read-write`,
    /// or a name that moved in a failover).
    public var isReadOnlyServer: Bool { state == .readOnlySQLTransaction }

    public var description: String {
        "database error: \(code)" + (sqlState.map { " (SQLSTATE \($0))" } ?? "")
    }

    public var debugDescription: String {
        description + (sourceFile.map { " in \($0)" } ?? "") + ": " + serverMessage
    }
}

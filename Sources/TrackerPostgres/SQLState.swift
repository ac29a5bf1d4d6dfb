/// The SQLSTATE codes the tracker tells apart, by PostgreSQL's names (Appendix A of its
/// manual): one place for the five-character codes, so no caller compares raw strings.
public struct SQLState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The class: the first two characters (`23` integrity constraint violation, …).
    public var errorClass: Substring { rawValue.prefix(2) }

    public var description: String { rawValue }

    // Class 0A, feature not supported (also a prepared statement whose result type changed).
    public static let featureNotSupported = SQLState(rawValue: "0A000")
    // Class 22, data exception.
    public static let stringDataRightTruncation = SQLState(rawValue: "22001")
    public static let numericValueOutOfRange = SQLState(rawValue: "22003")
    public static let datetimeFieldOverflow = SQLState(rawValue: "22008")
    public static let characterNotInRepertoire = SQLState(rawValue: "22021")
    public static let untranslatableCharacter = SQLState(rawValue: "22P05")
    // Class 23, integrity constraint violation.
    public static let uniqueViolation = SQLState(rawValue: "23505")
    public static let checkViolation = SQLState(rawValue: "23514")
    // Class 25, invalid transaction state.
    public static let readOnlySQLTransaction = SQLState(rawValue: "25006")
    // Class 26, invalid SQL statement name (a prepared statement the session does not have).
    public static let invalidSQLStatementName = SQLState(rawValue: "26000")
    // Class 40, transaction rollback.
    public static let serializationFailure = SQLState(rawValue: "40001")
    public static let deadlockDetected = SQLState(rawValue: "40P01")
    // Class 42, syntax error or access rule violation.
    public static let insufficientPrivilege = SQLState(rawValue: "42501")
    public static let undefinedTable = SQLState(rawValue: "42P01")
    public static let undefinedColumn = SQLState(rawValue: "42703")
    public static let undefinedObject = SQLState(rawValue: "42704")
    // Class 54, program limit exceeded.
    public static let programLimitExceeded = SQLState(rawValue: "54000")
    // Class 55, object not in prerequisite state.
    public static let lockNotAvailable = SQLState(rawValue: "55P03")
    // Class 57, operator intervention.
    public static let queryCanceled = SQLState(rawValue: "57014")
    public static let adminShutdown = SQLState(rawValue: "57P01")
    public static let crashShutdown = SQLState(rawValue: "57P02")
    public static let cannotConnectNow = SQLState(rawValue: "57P03")
    public static let idleSessionTimeout = SQLState(rawValue: "57P05")
    // Class 58, system error (errors external to PostgreSQL itself).
    /// A read or write failed: the server's disk, or, from Citus, the COPY stream to a worker
    /// (`failed to COPY to shard …`).
    public static let ioError = SQLState(rawValue: "58030")
    /// Class XX: what the server did not classify. Citus gives its own errors and a worker's
    /// errors it relays without their SQLSTATE this code: a worker's unique violation during a
    /// multi-shard COPY, and a connection to a worker that failed (`DatabaseError.transience`).
    public static let internalError = SQLState(rawValue: "XX000")

    // Whole classes, by the first two characters (`errorClass`).
    /// Class 08: the connection to the server failed (on Citus, also the coordinator's to a worker).
    public static let connectionException: Substring = "08"
    /// Class 53: the server is short of connections, memory or disk.
    public static let insufficientResources: Substring = "53"
}

extension DatabaseError {
    /// The SQLSTATE, when the server sent one.
    public var state: SQLState? { sqlState.map(SQLState.init(rawValue:)) }
}

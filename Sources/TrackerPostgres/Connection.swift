#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CLibPQ

/// One libpq connection, used synchronously by exactly one thread at a time.
///
/// Instances never leave the pool: they are lent to closures that the pool runs on one of its
/// threads, one borrower at a time, which is what makes the raw handle safe to share.
public final class Connection {
    private let handle: OpaquePointer
    private var closed = false
    /// The `PreparedStatement`s this connection has prepared, by name.
    private var prepared: Set<String> = []
    /// Those the session still holds in a form PostgreSQL refuses to run: deallocated before
    /// they are prepared again.
    private var stale: Set<String> = []
    /// What the connection was opened with: how the tracker reaches the other servers of a
    /// Citus cluster with the same login and options.
    public let conninfo: String

    /// Opens a connection. `conninfo` is a `key=value` string or a `postgresql://` URL.
    public static func open(_ conninfo: String, connectTimeoutSeconds: Int = 3, applicationName: String = "tracker") throws(DatabaseError) -> Connection {
        // Earlier keywords are defaults: whatever the URL itself says overrides them. TCP
        // keepalives find a database host that vanished (power loss, a partition) within about
        // 30 s instead of the kernel's two hours; a frozen server process on a live host still
        // answers them, which is why the event log also has its own deadline (EventLog).
        let keys = ["connect_timeout", "application_name", "keepalives", "keepalives_idle", "keepalives_interval",
                    "keepalives_count", "dbname"]
        let values = [String(connectTimeoutSeconds), applicationName, "1", "15", "5", "3", conninfo]
        let raw: OpaquePointer? = withCStrings(keys) { k in
            withCStrings(values) { v in PQconnectdbParams(k, v, 1) }
        }
        guard let raw else {
            throw DatabaseError(.unavailable, serverMessage: "out of memory allocating a PostgreSQL connection")
        }
        guard PQstatus(raw) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(raw))
            PQfinish(raw)
            let code: DatabaseError.Code = message.contains("invalid") || message.contains("missing") ? .invalidConfiguration : .unavailable
            throw DatabaseError(code, serverMessage: message)
        }
        // Server notices ("relation already exists, skipping") are not errors; keep them off stderr.
        PQsetNoticeProcessor(raw, { _, _ in }, nil)
        return Connection(handle: raw, conninfo: conninfo)
    }

    private init(handle: OpaquePointer, conninfo: String) {
        self.handle = handle
        self.conninfo = conninfo
    }

    deinit {
        if !closed { PQfinish(handle) }
    }

    public func close() {
        guard !closed else { return }
        closed = true
        PQfinish(handle)
    }

    /// False once the server went away; such a connection is discarded by the pool.
    ///
    /// An idle connection has nothing to read: if its socket is readable, the server sent a
    /// termination notice or closed it (a restart, an administrator's kill), so it is not
    /// lent again. This spares the first request after a database restart from failing on
    /// a dead socket. (We use no LISTEN, so nothing else arrives unasked.)
    public var isHealthy: Bool {
        guard !closed, PQstatus(handle) == CONNECTION_OK else { return false }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        guard descriptor.fd >= 0 else { return false }
        return poll(&descriptor, 1, 0) == 0
    }

    /// `password` as the SCRAM-SHA-256 verifier PostgreSQL stores for `role`, computed here by
    /// libpq (`PQencryptPasswordConn`): `ALTER ROLE … PASSWORD` then carries only the verifier,
    /// so the password itself never reaches the server or its statement log.
    public func scramVerifier(password: String, role: String) throws(DatabaseError) -> String {
        guard let raw = PQencryptPasswordConn(handle, password, role, "scram-sha-256") else {
            throw DatabaseError(.queryFailed, serverMessage: String(cString: PQerrorMessage(handle)))
        }
        defer { PQfreemem(raw) }
        return String(cString: raw)
    }

    /// Ends a transaction a failed borrower left open, so the next one starts clean.
    public func rollbackIfInTransaction() {
        guard !closed, PQtransactionStatus(handle) != PQTRANS_IDLE else { return }
        PQclear(PQexec(handle, "ROLLBACK"))
    }

    /// Runs SQL without parameters; may hold several statements (migrations).
    public func execute(_ sql: String) throws(DatabaseError) {
        let result = PQexec(handle, sql)
        _ = try check(result, sql: sql)
    }

    /// Runs one statement with text parameters and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [String?] = []) throws(DatabaseError) -> QueryResult {
        try query(sql, parameters.map { $0.map(Parameter.text) ?? .null })
    }

    /// Runs one statement with typed parameters (text or binary) and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [Parameter]) throws(DatabaseError) -> QueryResult {
        try query(sql, parameters, binaryResults: false)
    }

    /// Runs one statement and returns its rows in PostgreSQL's binary format (read them with
    /// `QueryResult.bytes`): no text to format on the server or to parse here.
    @discardableResult
    public func query(_ sql: String, _ parameters: [Parameter], binaryResults: Bool) throws(DatabaseError) -> QueryResult {
        let marshalled = MarshalledParameters(parameters)
        let result: OpaquePointer? = withPointers(marshalled.buffers) { values in
            PQexecParams(handle, sql, marshalled.count, marshalled.types, values, marshalled.lengths, marshalled.formats,
                         binaryResults ? 1 : 0)
        }
        return try check(result, sql: sql)
    }

    /// Runs a statement prepared on this connection, preparing it the first time: PostgreSQL
    /// parses, analyses and plans it once per connection instead of on every run (a third of
    /// PostgreSQL's CPU for single-event ingestion went there). The parameters' types must be
    /// the same on every run; a text parameter's type is inferred from the SQL.
    @discardableResult
    public func query(_ statement: PreparedStatement, _ parameters: [Parameter], binaryResults: Bool = false) throws(DatabaseError) -> QueryResult {
        do {
            return try runPrepared(statement, parameters, binaryResults: binaryResults)
        } catch where error.state == .invalidSQLStatementName {
            // Gone from the session (a DISCARD by someone sharing it): prepare it again, once.
            prepared.remove(statement.name)
            return try runPrepared(statement, parameters, binaryResults: binaryResults)
        } catch where error.state == .featureNotSupported && error.serverMessage.contains("cached plan must not change result type") {
            // A table it reads changed the columns it returns (a migration while this process
            // serves): PostgreSQL keeps refusing the old statement, so it is made anew, once.
            // In a transaction the error has aborted, the next run remakes it instead.
            prepared.remove(statement.name)
            stale.insert(statement.name)
            guard PQtransactionStatus(handle) == PQTRANS_IDLE else { throw error }
            return try runPrepared(statement, parameters, binaryResults: binaryResults)
        }
    }

    private func runPrepared(_ statement: PreparedStatement, _ parameters: [Parameter], binaryResults: Bool) throws(DatabaseError) -> QueryResult {
        let marshalled = MarshalledParameters(parameters)
        if !prepared.contains(statement.name) {
            if stale.contains(statement.name) {
                _ = try check(PQexec(handle, "DEALLOCATE \"\(statement.name)\""), sql: "DEALLOCATE")
                stale.remove(statement.name)
            }
            _ = try check(PQprepare(handle, statement.name, statement.sql, marshalled.count, marshalled.types), sql: statement.sql)
            prepared.insert(statement.name)
        }
        let result: OpaquePointer? = withPointers(marshalled.buffers) { values in
            PQexecPrepared(handle, statement.name, marshalled.count, values, marshalled.lengths, marshalled.formats,
                           binaryResults ? 1 : 0)
        }
        return try check(result, sql: statement.sql)
    }

    /// Streams rows into `COPY … FROM STDIN` in chunks; returns the number of rows copied.
    @discardableResult
    public func copyIn(_ sql: String, chunks: some Sequence<[UInt8]>) throws(DatabaseError) -> Int {
        guard let start = PQexec(handle, sql) else {
            throw DatabaseError(.unavailable, serverMessage: String(cString: PQerrorMessage(handle)))
        }
        guard PQresultStatus(start) == PGRES_COPY_IN else {
            _ = try check(start, sql: sql)  // throws the server's error, or clears the result
            throw DatabaseError(.unexpectedResult, serverMessage: "COPY did not enter COPY IN state")
        }
        PQclear(start)
        for chunk in chunks where !chunk.isEmpty {
            let sent = chunk.withUnsafeBufferPointer { buf in
                buf.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buf.count) {
                    PQputCopyData(handle, $0, Int32(buf.count))
                }
            }
            guard sent == 1 else { break }
        }
        _ = PQputCopyEnd(handle, nil)
        let end = try check(PQgetResult(handle), sql: sql)
        // Drain: libpq wants a NULL result before the connection is idle again.
        while let extra = PQgetResult(handle) { PQclear(extra) }
        return Int(end.affectedRows)
    }

    /// Runs `sql`, several `COPY … FROM STDIN` statements in one string, sending `data[i]` to
    /// the i-th. One query string is one implicit transaction: the copies commit together when
    /// the last one ends, or none does, in three round trips for two copies where
    /// `BEGIN`, each COPY and `COMMIT` apart take six.
    public func copyIn(_ sql: String, each data: [[UInt8]]) throws(DatabaseError) {
        guard var result = PQexec(handle, sql) else {
            throw DatabaseError(.unavailable, serverMessage: String(cString: PQerrorMessage(handle)))
        }
        var next = 0
        var failure: DatabaseError?
        while true {
            if PQresultStatus(result) == PGRES_COPY_IN {
                PQclear(result)
                if next < data.count {
                    let sent = data[next].withUnsafeBufferPointer { buf in
                        buf.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buf.count) {
                            PQputCopyData(handle, $0, Int32(buf.count))
                        }
                    }
                    _ = PQputCopyEnd(handle, sent == 1 ? nil : "the data could not be sent")
                } else {
                    _ = PQputCopyEnd(handle, "more COPY statements than data")
                }
                next += 1
            } else if failure == nil {
                do { _ = try check(result, sql: sql) } catch { failure = error }
            } else {
                PQclear(result)
            }
            // libpq wants every result read, up to a NULL, before the connection is idle again.
            guard let more = PQgetResult(handle) else { break }
            result = more
        }
        if let failure { throw failure }
    }

    /// Streams the rows of `COPY … TO STDOUT` to `consume`, one row's data per call (binary
    /// COPY: the header arrives with the first row, the trailer as its own call).
    ///
    /// A throw from `consume` cancels the COPY and is rethrown once the connection is idle again.
    public func copyOut(_ sql: String, _ consume: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let start = PQexec(handle, sql) else {
            throw DatabaseError(.unavailable, serverMessage: String(cString: PQerrorMessage(handle)))
        }
        guard PQresultStatus(start) == PGRES_COPY_OUT else {
            _ = try check(start, sql: sql)
            throw DatabaseError(.unexpectedResult, serverMessage: "COPY did not enter COPY OUT state")
        }
        PQclear(start)
        var failure: (any Error)?
        while true {
            var buffer: UnsafeMutablePointer<CChar>?
            let length = PQgetCopyData(handle, &buffer, 0)
            if length < 0 { break }  // -1: done, -2: error (reported by PQgetResult below)
            if let buffer {
                if failure == nil {
                    do { try consume(UnsafeRawBufferPointer(start: buffer, count: Int(length))) } catch {
                        failure = error
                        _ = PQrequestCancel(handle)
                    }
                }
                PQfreemem(buffer)
            }
        }
        let end = PQgetResult(handle)
        while let extra = PQgetResult(handle) { PQclear(extra) }
        if let failure {
            if let end { PQclear(end) }
            throw failure
        }
        _ = try check(end, sql: sql)
    }

    /// Runs `body` inside BEGIN … COMMIT, rolling back when it throws. `begin` may name an
    /// isolation level (`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`: every statement of
    /// `body` reads one snapshot).
    public func transaction<T>(begin: String = "BEGIN", _ body: () throws -> T) throws -> T {
        try execute(begin)
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            if isHealthy { try? execute("ROLLBACK") }
            throw error
        }
    }

    private func check(_ result: OpaquePointer?, sql: String) throws(DatabaseError) -> QueryResult {
        guard let result else {
            throw DatabaseError(.unavailable, serverMessage: String(cString: PQerrorMessage(handle)))
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY, PGRES_COPY_IN:
            return QueryResult(result)
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let constraint = PQresultErrorField(result, Int32(UInt8(ascii: "n"))).map { String(cString: $0) }
            let sourceFile = PQresultErrorField(result, Int32(UInt8(ascii: "F"))).map { String(cString: $0) }
            var message = String(cString: PQresultErrorMessage(result))
            if message.isEmpty { message = String(cString: PQerrorMessage(handle)) }
            PQclear(result)
            let broken = PQstatus(handle) != CONNECTION_OK
            throw DatabaseError(broken && state == nil ? .unavailable : .queryFailed, sqlState: state, serverMessage: message,
                                constraint: constraint, sourceFile: sourceFile)
        }
    }
}

/// A statement that a connection prepares once and then runs by name (`Connection.query`).
/// Each name must stand for one SQL text.
public struct PreparedStatement: Sendable, Hashable {
    public let name: String
    public let sql: String

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }
}

/// Parameters as libpq takes them: type OIDs, lengths, formats and NUL-ended or binary values.
private struct MarshalledParameters {
    var count: Int32
    var types: [Oid]
    var lengths: [Int32]
    var formats: [Int32]
    var buffers: [[UInt8]?]

    init(_ parameters: [Parameter]) {
        count = Int32(parameters.count)
        types = [Oid](repeating: 0, count: parameters.count)
        lengths = [Int32](repeating: 0, count: parameters.count)
        formats = [Int32](repeating: 0, count: parameters.count)
        buffers = []
        buffers.reserveCapacity(parameters.count)
        for (i, p) in parameters.enumerated() {
            switch p {
            case .null:
                buffers.append(nil)
            case .text(let s):
                var bytes = Array(s.utf8)
                bytes.append(0)
                buffers.append(bytes)
            case .binary(let oid, let bytes):
                types[i] = oid
                lengths[i] = Int32(bytes.count)
                formats[i] = 1
                buffers.append(bytes)
            }
        }
    }
}

/// A statement parameter: SQL NULL, text, or binary with its type OID.
public enum Parameter: Sendable {
    case null
    case text(String)
    case binary(oid: UInt32, bytes: [UInt8])
}

private func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    var storage: [[CChar]] = strings.map { Array($0.utf8CString) }
    var pointers: [UnsafePointer<CChar>?] = []
    pointers.reserveCapacity(storage.count + 1)
    return storage.withUnsafeMutableBufferPointer { all in
        for i in all.indices {
            all[i].withUnsafeBufferPointer { pointers.append($0.baseAddress) }
        }
        pointers.append(nil)
        return body(pointers)
    }
}

private func withPointers<R>(_ buffers: [[UInt8]?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    // The arrays stay alive for the call because `buffers` is held by the caller's frame;
    // we take their base addresses inside nested scopes to keep that guarantee explicit.
    func recurse(_ index: Int, _ acc: inout [UnsafePointer<CChar>?]) -> R {
        if index == buffers.count { return body(acc) }
        guard let buffer = buffers[index] else {
            acc.append(nil)
            return recurse(index + 1, &acc)
        }
        return buffer.withUnsafeBufferPointer { buf in
            buf.baseAddress!.withMemoryRebound(to: CChar.self, capacity: max(buf.count, 1)) { p in
                acc.append(p)
                return recurse(index + 1, &acc)
            }
        }
    }
    var acc: [UnsafePointer<CChar>?] = []
    acc.reserveCapacity(buffers.count)
    return recurse(0, &acc)
}

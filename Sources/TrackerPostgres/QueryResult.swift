import CLibPQ

/// The rows of one statement, read in place from libpq's result (text format).
///
/// Not `Sendable`: it lives inside the closure that ran the query, or is handed once to a
/// single reader that only reads it (the projector's read-ahead window). Its `PGresult` is
/// cleared when it goes away.
public final class QueryResult {
    private let result: OpaquePointer

    init(_ result: OpaquePointer) {
        self.result = result
    }

    deinit {
        PQclear(result)
    }

    public var rowCount: Int { Int(PQntuples(result)) }
    public var columnCount: Int { Int(PQnfields(result)) }

    /// Rows changed by INSERT/UPDATE/DELETE/COPY.
    public var affectedRows: Int {
        Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    public func isNull(_ row: Int, _ column: Int) -> Bool {
        PQgetisnull(result, Int32(row), Int32(column)) == 1
    }

    public func string(_ row: Int, _ column: Int) -> String? {
        if isNull(row, column) { return nil }
        return String(cString: PQgetvalue(result, Int32(row), Int32(column)))
    }

    /// Parses an integer column without building a String.
    public func int64(_ row: Int, _ column: Int) -> Int64? {
        if isNull(row, column) { return nil }
        guard var p = PQgetvalue(result, Int32(row), Int32(column)) else { return nil }
        var negative = false
        if p.pointee == CChar(UInt8(ascii: "-")) { negative = true; p += 1 }
        var value: Int64 = 0
        while p.pointee != 0 {
            let digit = Int64(p.pointee) - 48
            guard digit >= 0, digit <= 9 else { return nil }
            value = value &* 10 &+ digit
            p += 1
        }
        return negative ? -value : value
    }

    /// The raw bytes of a value (binary results: PostgreSQL's send format); empty for NULL.
    /// Valid only while this result lives.
    public func bytes(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer {
        let length = Int(PQgetlength(result, Int32(row), Int32(column)))
        guard length > 0, let p = PQgetvalue(result, Int32(row), Int32(column)) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: p, count: length)
    }

    public func bool(_ row: Int, _ column: Int) -> Bool? {
        if isNull(row, column) { return nil }
        return PQgetvalue(result, Int32(row), Int32(column))?.pointee == CChar(UInt8(ascii: "t"))
    }

    /// All values as strings, for small results and tests.
    public var rows: [[String?]] {
        (0..<rowCount).map { r in (0..<columnCount).map { c in string(r, c) } }
    }
}

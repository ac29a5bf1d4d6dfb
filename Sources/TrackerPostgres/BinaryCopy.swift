/// Rows in PostgreSQL's binary COPY format, for `COPY … FROM STDIN (FORMAT binary)`.
///
/// A field is written as an element of a `BinaryArray` is (its length, then its binary send
/// format; -1 for NULL), and a row is its field count followed by its fields.
public struct BinaryCopyRows {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(19 + capacity)
        // The signature "PGCOPY\n\377\r\n\0", no flags, no header extension.
        bytes.append(contentsOf: [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00])
        bytes.appendBigEndian(Int32(0))
        bytes.appendBigEndian(Int32(0))
    }

    /// Starts a row of `fields` fields; exactly that many appends must follow.
    public mutating func beginRow(fields: Int16) {
        bytes.appendBigEndian(fields)
    }

    /// Ends the data with its trailer and returns it: the rows are complete.
    public mutating func finish() -> [UInt8] {
        bytes.appendBigEndian(Int16(-1))
        return bytes
    }

    public mutating func appendNull() {
        bytes.appendBigEndian(Int32(-1))
    }

    public mutating func append(_ value: Bool) {
        bytes.appendBigEndian(Int32(1))
        bytes.append(value ? 1 : 0)
    }

    public mutating func append(_ value: Int32) {
        bytes.appendBigEndian(Int32(4))
        bytes.appendBigEndian(value)
    }

    /// Text, or the label of an enum (its binary input is its label).
    public mutating func append(_ value: String) {
        bytes.appendBigEndian(Int32(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    public mutating func append(_ value: String?) {
        if let value { append(value) } else { appendNull() }
    }

    /// A `jsonb` given as JSON text.
    public mutating func append(jsonb value: String?) {
        guard let value else { return appendNull() }
        bytes.appendBigEndian(Int32(value.utf8.count + 1))
        bytes.append(1)  // jsonb binary format version
        bytes.append(contentsOf: value.utf8)
    }

    /// A `timestamptz` given in microseconds since 1970-01-01 UTC.
    public mutating func append(microsecondsSince1970 value: Int64) {
        bytes.appendBigEndian(Int32(8))
        bytes.appendBigEndian(value - BinaryArray.postgresEpochOffset)
    }

    /// A UUID given as its 16 bytes in two big-endian halves.
    public mutating func append(uuid high: UInt64, _ low: UInt64) {
        bytes.appendBigEndian(Int32(16))
        bytes.appendBigEndian(high)
        bytes.appendBigEndian(low)
    }

    /// A value already in its binary send format (an `inet`, a `bytea`).
    public mutating func append(bytes value: some Collection<UInt8>) {
        bytes.appendBigEndian(Int32(value.count))
        bytes.append(contentsOf: value)
    }
}

/// Values in PostgreSQL's binary send format, each written as a field: its length (-1 for
/// NULL), then its bytes. An element of a `BinaryArray` and a field of a `BinaryCopyRows` row
/// are both written so; domain types add their own appends on top of these.
public protocol BinaryFieldWriter {
    mutating func appendNull()
    mutating func append(_ value: Bool)
    mutating func append(_ value: Int32)
    mutating func append(_ value: Int64)
    /// Text, or the label of an enum (its binary input is its label).
    mutating func append(_ value: String)
    /// A `jsonb` given as JSON text.
    mutating func append(jsonb value: String)
    /// A `timestamptz` given in microseconds since 1970-01-01 UTC (PostgreSQL counts from 2000).
    mutating func append(microsecondsSince1970 value: Int64)
    /// A UUID given as its 16 bytes in two big-endian halves.
    mutating func append(uuid high: UInt64, _ low: UInt64)
    /// A value already in its binary send format (a `bytea`, a `tid`, an `inet`).
    mutating func append(bytes value: some Collection<UInt8>)
}

extension BinaryFieldWriter {
    public mutating func append(_ value: String?) {
        if let value { append(value) } else { appendNull() }
    }

    public mutating func append(jsonb value: String?) {
        if let value { append(jsonb: value) } else { appendNull() }
    }

    public mutating func append(_ value: Int32?) {
        if let value { append(value) } else { appendNull() }
    }
}

/// The bytes of one field, shared by the writers.
enum BinaryField {
    /// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
    static let postgresEpochOffset: Int64 = 946_684_800 * 1_000_000

    static func null(_ out: inout [UInt8]) { out.appendBigEndian(Int32(-1)) }

    static func bool(_ value: Bool, _ out: inout [UInt8]) {
        out.appendBigEndian(Int32(1))
        out.append(value ? 1 : 0)
    }

    static func integer<T: FixedWidthInteger>(_ value: T, _ out: inout [UInt8]) {
        out.appendBigEndian(Int32(T.bitWidth / 8))
        out.appendBigEndian(value)
    }

    static func text(_ value: String, jsonb: Bool, _ out: inout [UInt8]) {
        if jsonb {
            out.appendBigEndian(Int32(value.utf8.count + 1))
            out.append(1)  // jsonb binary format version
        } else {
            out.appendBigEndian(Int32(value.utf8.count))
        }
        out.append(contentsOf: value.utf8)
    }

    static func uuid(_ high: UInt64, _ low: UInt64, _ out: inout [UInt8]) {
        out.appendBigEndian(Int32(16))
        out.appendBigEndian(high)
        out.appendBigEndian(low)
    }

    static func bytes(_ value: some Collection<UInt8>, _ out: inout [UInt8]) {
        out.appendBigEndian(Int32(value.count))
        out.append(contentsOf: value)
    }
}

/// Rows in PostgreSQL's binary COPY format, for `COPY … FROM STDIN (FORMAT binary)`: a row is
/// its field count followed by its fields.
public struct BinaryCopyRows: BinaryFieldWriter {
    /// What the data starts with: the signature "PGCOPY\n\377\r\n\0", no flags, no header extension.
    public static let header: [UInt8] = [0x50, 0x47, 0x43, 0x4F, 0x50, 0x59, 0x0A, 0xFF, 0x0D, 0x0A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]
    /// What the data ends with.
    public static let trailer: [UInt8] = [0xFF, 0xFF]

    public private(set) var bytes: [UInt8]

    /// Rows that begin the data with its header, or (`header: false`) rows to send after others.
    public init(capacity: Int = 0, header: Bool = true) {
        bytes = []
        bytes.reserveCapacity(Self.header.count + capacity)
        if header { bytes += Self.header }
    }

    /// Starts a row of `fields` fields; exactly that many appends must follow.
    public mutating func beginRow(fields: Int16) {
        bytes.appendBigEndian(fields)
    }

    /// Ends the data with its trailer and returns it: the rows are complete.
    public mutating func finish() -> [UInt8] {
        bytes += Self.trailer
        return bytes
    }

    public mutating func appendNull() { BinaryField.null(&bytes) }
    public mutating func append(_ value: Bool) { BinaryField.bool(value, &bytes) }
    public mutating func append(_ value: Int32) { BinaryField.integer(value, &bytes) }
    public mutating func append(_ value: Int64) { BinaryField.integer(value, &bytes) }
    public mutating func append(_ value: String) { BinaryField.text(value, jsonb: false, &bytes) }
    public mutating func append(jsonb value: String) { BinaryField.text(value, jsonb: true, &bytes) }

    public mutating func append(microsecondsSince1970 value: Int64) {
        BinaryField.integer(value - BinaryField.postgresEpochOffset, &bytes)
    }

    public mutating func append(uuid high: UInt64, _ low: UInt64) { BinaryField.uuid(high, low, &bytes) }
    public mutating func append(bytes value: some Collection<UInt8>) { BinaryField.bytes(value, &bytes) }
}

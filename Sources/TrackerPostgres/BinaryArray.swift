/// Builds one-dimensional PostgreSQL arrays in the binary wire format.
///
/// The ingest statement sends each column of a group of events as one array
/// parameter; binary arrays spare the server from parsing text for every value
/// (timestamps above all), which is most of the cost of a text-format insert.
public struct BinaryArray {
    /// Type OIDs of the element types we send.
    public enum Element: UInt32, Sendable {
        case bool = 16
        case bytea = 17
        case tid = 27
        case int8 = 20
        case int4 = 23
        case inet = 869
        case text = 25
        case timestamptz = 1184
        case uuid = 2950
        case jsonb = 3802

        /// The OID of the array type over this element type.
        public var arrayOID: UInt32 {
            switch self {
            case .bool: 1000
            case .bytea: 1001
            case .tid: 1010
            case .int8: 1016
            case .int4: 1007
            case .inet: 1041
            case .text: 1009
            case .timestamptz: 1185
            case .uuid: 2951
            case .jsonb: 3807
            }
        }
    }

    /// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
    static let postgresEpochOffset: Int64 = 946_684_800 * 1_000_000

    public let element: Element
    private var bytes: [UInt8]
    private var count: Int32 = 0

    public init(_ element: Element, capacity: Int = 0) {
        self.element = element
        bytes = []
        bytes.reserveCapacity(20 + capacity * 16)
        appendInt32(1)  // dimensions
        appendInt32(0)  // has-nulls flag, set by the first `appendNull`
        appendInt32(Int32(bitPattern: element.rawValue))
        appendInt32(0)  // length of the dimension, kept current by every append
        appendInt32(1)  // lower bound
    }

    public mutating func appendNull() {
        appendInt32(-1)
        didAppendElement()
        if !hasNulls {
            hasNulls = true
            Self.store(1, into: &bytes, at: 4)
        }
    }

    public mutating func append(_ value: Bool) {
        appendInt32(1)
        bytes.append(value ? 1 : 0)
        didAppendElement()
    }

    public mutating func append(_ value: Int64) {
        appendInt32(8)
        appendInt64(value)
        didAppendElement()
    }

    public mutating func append(_ value: Int32) {
        appendInt32(4)
        appendInt32(value)
        didAppendElement()
    }

    public mutating func append(_ value: String) {
        if element == .jsonb {
            appendInt32(Int32(value.utf8.count + 1))
            bytes.append(1)  // jsonb binary format version
        } else {
            appendInt32(Int32(value.utf8.count))
        }
        bytes.append(contentsOf: value.utf8)
        didAppendElement()
    }

    public mutating func append(_ value: String?) {
        if let value { append(value) } else { appendNull() }
    }

    /// Appends a `timestamptz` given in microseconds since 1970-01-01 UTC (PostgreSQL counts from 2000).
    public mutating func append(microsecondsSince1970 value: Int64) {
        appendInt32(8)
        appendInt64(value - BinaryArray.postgresEpochOffset)
        didAppendElement()
    }

    /// Appends raw bytes as one element (`bytea`, or a value already in its binary send format, e.g. a `tid`).
    public mutating func append(bytes value: some Collection<UInt8>) {
        appendInt32(Int32(value.count))
        bytes.append(contentsOf: value)
        didAppendElement()
    }

    /// Appends a UUID given as its 16 bytes in two big-endian halves.
    public mutating func append(uuid high: UInt64, _ low: UInt64) {
        appendInt32(16)
        appendInt64(Int64(bitPattern: high))
        appendInt64(Int64(bitPattern: low))
        didAppendElement()
    }

    private var hasNulls = false

    /// The finished array as a binary statement parameter. The header is kept up to date as
    /// elements are appended, so this shares the bytes instead of copying them.
    public var parameter: Parameter {
        .binary(oid: element.arrayOID, bytes: bytes)
    }

    /// Counts an element in the header's dimension length.
    private mutating func didAppendElement() {
        count += 1
        Self.store(count, into: &bytes, at: 12)
    }

    private mutating func appendInt32(_ v: Int32) {
        bytes.appendBigEndian(v)
    }

    private mutating func appendInt64(_ v: Int64) {
        bytes.appendBigEndian(v)
    }

    private static func store(_ v: Int32, into out: inout [UInt8], at offset: Int) {
        let u = UInt32(bitPattern: v)
        out[offset] = UInt8(truncatingIfNeeded: u >> 24)
        out[offset + 1] = UInt8(truncatingIfNeeded: u >> 16)
        out[offset + 2] = UInt8(truncatingIfNeeded: u >> 8)
        out[offset + 3] = UInt8(truncatingIfNeeded: u)
    }
}

/// Single values in PostgreSQL's binary format, as a binary result or a binary COPY gives them.
public enum BinaryValue {
    /// A `timestamptz` (8 bytes: microseconds since 2000-01-01) as microseconds since 1970;
    /// `nil` when it is not 8 bytes (NULL, or another type).
    public static func microsecondsSince1970(timestamptz bytes: UnsafeRawBufferPointer) -> Int64? {
        guard bytes.count == 8 else { return nil }
        var value: UInt64 = 0
        for b in bytes { value = value << 8 | UInt64(b) }
        return Int64(bitPattern: value) &+ BinaryArray.postgresEpochOffset
    }
}

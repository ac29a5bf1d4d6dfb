/// Builds one-dimensional PostgreSQL arrays in the binary wire format.
///
/// Statements that take many values of a column (the conflict-checking append, the
/// projector's writes) send each column as one array parameter; binary arrays spare the
/// server from parsing text for every value (timestamps above all), which is most of the
/// cost of a text-format insert.
public struct BinaryArray: BinaryFieldWriter {
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

    public let element: Element
    private var bytes: [UInt8]
    /// The elements appended so far.
    public private(set) var count: Int32 = 0
    private var hasNulls = false

    public init(_ element: Element, capacity: Int = 0) {
        self.element = element
        bytes = []
        bytes.reserveCapacity(20 + capacity * 16)
        bytes.appendBigEndian(Int32(1))  // dimensions
        bytes.appendBigEndian(Int32(0))  // has-nulls flag, set by the first `appendNull`
        bytes.appendBigEndian(Int32(bitPattern: element.rawValue))
        bytes.appendBigEndian(Int32(0))  // length of the dimension, kept current by every append
        bytes.appendBigEndian(Int32(1))  // lower bound
    }

    public mutating func appendNull() {
        BinaryField.null(&bytes)
        didAppendElement()
        if !hasNulls {
            hasNulls = true
            Self.store(1, into: &bytes, at: 4)
        }
    }

    public mutating func append(_ value: Bool) {
        BinaryField.bool(value, &bytes)
        didAppendElement()
    }

    public mutating func append(_ value: Int64) {
        BinaryField.integer(value, &bytes)
        didAppendElement()
    }

    public mutating func append(_ value: Int32) {
        BinaryField.integer(value, &bytes)
        didAppendElement()
    }

    /// Text; in a `jsonb` array, JSON text.
    public mutating func append(_ value: String) {
        BinaryField.text(value, jsonb: element == .jsonb, &bytes)
        didAppendElement()
    }

    public mutating func append(jsonb value: String) {
        precondition(element == .jsonb, "a jsonb value in an array of \(element)")
        append(value)
    }

    public mutating func append(microsecondsSince1970 value: Int64) {
        BinaryField.integer(value - BinaryField.postgresEpochOffset, &bytes)
        didAppendElement()
    }

    public mutating func append(bytes value: some Collection<UInt8>) {
        BinaryField.bytes(value, &bytes)
        didAppendElement()
    }

    public mutating func append(uuid high: UInt64, _ low: UInt64) {
        BinaryField.uuid(high, low, &bytes)
        didAppendElement()
    }

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
        return Int64(bitPattern: value) &+ BinaryField.postgresEpochOffset
    }
}

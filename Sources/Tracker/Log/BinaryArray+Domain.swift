extension Timestamp {
    /// A binary `timestamptz`; `nil` when the bytes are not one (NULL).
    init?(timestamptz bytes: UnsafeRawBufferPointer) {
        guard let micros = BinaryValue.microsecondsSince1970(timestamptz: bytes) else { return nil }
        self.init(microseconds: micros)
    }
}

extension BinaryArray {
    public mutating func append(_ value: Timestamp) {
        append(microsecondsSince1970: value.microseconds)
    }

    public mutating func append(_ value: Timestamp?) {
        if let value { append(value) } else { appendNull() }
    }

    /// A UUID as its 16 bytes.
    public mutating func append(_ value: UUIDText) {
        append(uuid: value.high, value.low)
    }
}

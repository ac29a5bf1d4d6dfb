extension Timestamp {
    /// A binary `timestamptz`; `nil` when the bytes are not one (NULL).
    init?(timestamptz bytes: UnsafeRawBufferPointer) {
        guard let micros = BinaryValue.microsecondsSince1970(timestamptz: bytes) else { return nil }
        self.init(microseconds: micros)
    }
}

extension BinaryFieldWriter {
    public mutating func append(_ value: Timestamp) {
        append(microsecondsSince1970: value.microseconds)
    }

    public mutating func append(_ value: Timestamp?) {
        if let value { append(value) } else { appendNull() }
    }

    /// A UUID as its 16 bytes.
    public mutating func append(_ value: PackedUUID) {
        append(uuid: value.high, value.low)
    }

    /// An address as a binary `inet` of one host (PostgreSQL's send format: family, prefix
    /// length, is-cidr flag, address length, address); `nil` as NULL.
    public mutating func append(_ value: IPAddress?) {
        guard let value else { return appendNull() }
        append(bytes: value.inetBinary)
    }
}

extension IPAddress {
    /// The address as a binary `inet` of one host.
    var inetBinary: [UInt8] {
        let address = bytes
        // PostgreSQL's own family numbers: PGSQL_AF_INET 2, PGSQL_AF_INET6 3.
        return [family == .v4 ? 2 : 3, UInt8(truncatingIfNeeded: address.count * 8), 0, UInt8(truncatingIfNeeded: address.count)]
            + address
    }

    /// The address of a binary `inet` (its prefix length is not kept); `nil` when the bytes are not one.
    init?(inetBinary bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= 4, bytes.count == 4 + Int(bytes[3]) else { return nil }
        // Read in place: the projector reads one per event, and the generic `init(bytes:)`
        // across modules walks a slice byte by byte through its witnesses.
        switch bytes[3] {
        case 4: self.init(ipv4: UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
        case 16: self.init(ipv6High: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt64.self)),
                           low: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt64.self)))
        default: return nil
        }
    }
}

/// One IPv4 or IPv6 address: a client's, a peer's, or one end of a range (PROTOCOL.md 8).
///
/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, `::ffff:0:0/96`) *is* the IPv4 address
/// `a.b.c.d` here, however it was written or received: a dual-stack socket reports IPv4 peers
/// that way, and the same client must be one client, inside the same ranges, whichever way
/// its address arrived. No other IPv6 form is folded into IPv4 (NAT64's `64:ff9b::/96` and
/// the deprecated IPv4-compatible `::a.b.c.d` stay IPv6 addresses).
///
/// Kept as 128 bits in two big-endian halves, so equality, hashing and range tests need no
/// allocation; an IPv4 address is its 32 bits in `low`.
public struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    /// IPv4 or IPv6.
    public enum Family: Sendable, Hashable, CustomStringConvertible {
        /// 32 bits, written `192.0.2.1`.
        case v4
        /// 128 bits, written `2001:db8::1`.
        case v6

        /// `IPv4` or `IPv6`, for messages.
        public var description: String { self == .v4 ? "IPv4" : "IPv6" }

        /// The number of bits of an address of this family: 32 or 128.
        public var bitCount: Int { self == .v4 ? 32 : 128 }
    }

    /// Whether this is an IPv4 or an IPv6 address.
    public let family: Family
    /// Bits 0 to 63 of an IPv6 address, big-endian; zero for IPv4.
    let high: UInt64
    /// Bits 64 to 127 of an IPv6 address, or the 32 bits of an IPv4 one, big-endian.
    let low: UInt64

    /// The IPv4 address whose 32 bits are `value` (`0x7F000001` is `127.0.0.1`).
    ///
    /// - Parameters:
    ///   - value: the address in host integer form, most significant byte first in the text.
    public init(ipv4 value: UInt32) {
        self.init(family: .v4, high: 0, low: UInt64(value))
    }

    private init(family: Family, high: UInt64, low: UInt64) {
        self.family = family
        self.high = high
        self.low = low
    }

    /// The IPv6 address whose 128 bits are `high` then `low`; an IPv4-mapped one becomes the
    /// IPv4 address.
    ///
    /// - Parameters:
    ///   - high: bits 0 to 63 (the first four groups of the text).
    ///   - low: bits 64 to 127 (the last four groups).
    public init(ipv6High high: UInt64, low: UInt64) {
        if high == 0, low >> 32 == 0xFFFF {
            self.init(ipv4: UInt32(truncatingIfNeeded: low))
        } else {
            self.init(family: .v6, high: high, low: low)
        }
    }

    /// The address in network byte order: 4 bytes for IPv4, 16 for IPv6; an IPv4-mapped IPv6
    /// address (16 bytes) becomes the IPv4 address. `nil` for any other count.
    ///
    /// - Parameters:
    ///   - bytes: the address as a socket or PostgreSQL's binary `inet` carries it.
    public init?(bytes: some Collection<UInt8>) {
        switch bytes.count {
        case 4:
            self.init(ipv4: UInt32(truncatingIfNeeded: bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }))
        case 16:
            var high: UInt64 = 0
            var low: UInt64 = 0
            for (i, b) in bytes.enumerated() {
                if i < 8 { high = high << 8 | UInt64(b) } else { low = low << 8 | UInt64(b) }
            }
            self.init(ipv6High: high, low: low)
        default:
            return nil
        }
    }

    /// Parses one address as PostgreSQL's `inet` writes it and as `X-Forwarded-For` carries it;
    /// `nil` when the text is anything else.
    ///
    /// Accepted: IPv4 as four decimal parts `0...255` (`192.0.2.1`), without leading zeros
    /// (`01.2.3.4` is refused: the C library reads it as octal, PostgreSQL as decimal, so it
    /// names no address for sure), and IPv6 in every RFC 4291 form: eight groups of one to
    /// four hex digits in either case, one `::` for a run of zero groups, and a dotted IPv4
    /// address in the last 32 bits (`::ffff:192.0.2.1`, `64:ff9b::192.0.2.1`). Refused: a zone
    /// (`fe80::1%eth0`), brackets, a port, a prefix length (`/24`, see `CIDRRange`),
    /// whitespace, and the shortened IPv4 forms `127.1` or `2130706433`.
    ///
    /// - Parameters:
    ///   - text: the address alone.
    public init?(_ text: some StringProtocol) {
        let utf8 = Array(text.utf8.prefix(Self.maxTextLength + 1))
        guard utf8.count <= Self.maxTextLength, let parsed = Self.parse(utf8) else { return nil }
        self = parsed
    }

    /// The longest text of an address (`ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`), so a
    /// long string is refused without being read whole.
    static let maxTextLength = 45

    /// The address in canonical text: dotted decimal for IPv4, RFC 5952 for IPv6 (lower-case
    /// hex, no leading zeros, the longest run of two or more zero groups as `::`, the first
    /// such run on a tie).
    public var description: String {
        switch family {
        case .v4:
            let v = UInt32(truncatingIfNeeded: low)
            return "\(v >> 24).\(v >> 16 & 0xFF).\(v >> 8 & 0xFF).\(v & 0xFF)"
        case .v6:
            let groups = (0..<8).map { i -> UInt16 in
                let half = i < 4 ? high : low
                return UInt16(truncatingIfNeeded: half >> (48 - 16 * (i % 4)))
            }
            // The longest run of zero groups, at least two long.
            var best = (start: -1, count: 1)
            var i = 0
            while i < 8 {
                guard groups[i] == 0 else { i += 1; continue }
                var j = i
                while j < 8, groups[j] == 0 { j += 1 }
                if j - i > best.count { best = (i, j - i) }
                i = j
            }
            func hex(_ range: Range<Int>) -> String {
                range.map { String(groups[$0], radix: 16) }.joined(separator: ":")
            }
            guard best.start >= 0 else { return hex(0..<8) }
            return hex(0..<best.start) + "::" + hex((best.start + best.count)..<8)
        }
    }

    /// The address's bytes in network order: 4 for IPv4, 16 for IPv6.
    public var bytes: [UInt8] {
        switch family {
        case .v4: return (0..<4).map { UInt8(truncatingIfNeeded: low >> (24 - 8 * $0)) }
        case .v6: return (0..<16).map { UInt8(truncatingIfNeeded: ($0 < 8 ? high : low) >> (56 - 8 * ($0 % 8))) }
        }
    }

    /// The network the address is in, as `TRACKER_IP_STORAGE=truncated` stores it: its /24
    /// for IPv4, its /48 for IPv6, host bits zero (`192.0.2.77` → `192.0.2.0`,
    /// `2001:db8:1:2::5` → `2001:db8:1::`).
    public func truncated() -> IPAddress {
        switch family {
        case .v4: return IPAddress(ipv4: UInt32(truncatingIfNeeded: low) & 0xFFFF_FF00)
        case .v6: return IPAddress(ipv6High: high & 0xFFFF_FFFF_FFFF_0000, low: 0)
        }
    }

    /// The address as a 128-bit key, `high` then `low` (IPv4 in the low 32 bits).
    var key: UInt128Key { UInt128Key(high: high, low: low) }

    // MARK: Parsing

    private static func parse(_ utf8: [UInt8]) -> IPAddress? {
        if utf8.contains(UInt8(ascii: ":")) { return parseIPv6(utf8) }
        return parseIPv4(utf8[...]).map { IPAddress(ipv4: $0) }
    }

    /// Four decimal parts `0...255` separated by dots, no leading zeros.
    static func parseIPv4(_ text: ArraySlice<UInt8>) -> UInt32? {
        var value: UInt32 = 0
        var parts = 0
        var i = text.startIndex
        while true {
            // One part: 1 to 3 digits, "0" only alone.
            var part: UInt32 = 0
            var digits = 0
            while i < text.endIndex, let d = decimalDigit(text[i]) {
                if digits == 1, part == 0 { return nil }
                part = part * 10 + d
                digits += 1
                i += 1
                if digits > 3 { return nil }
            }
            guard digits > 0, part <= 255 else { return nil }
            value = value << 8 | part
            parts += 1
            if parts == 4 { return i == text.endIndex ? value : nil }
            guard i < text.endIndex, text[i] == UInt8(ascii: ".") else { return nil }
            i += 1
        }
    }

    /// RFC 4291 section 2.2: up to eight groups, one `::`, an optional dotted IPv4 tail.
    private static func parseIPv6(_ text: [UInt8]) -> IPAddress? {
        var groups: [UInt16] = []
        groups.reserveCapacity(8)
        var gap: Int?  // index in `groups` where `::` stands
        var i = 0
        let n = text.count
        if n >= 2, text[0] == UInt8(ascii: ":"), text[1] == UInt8(ascii: ":") {
            gap = 0
            i = 2
            if i == n { return IPAddress(ipv6High: 0, low: 0) }
        } else if n >= 1, text[0] == UInt8(ascii: ":") {
            return nil
        }
        while i < n {
            // A group of hex digits, or the dotted IPv4 tail.
            let start = i
            var value: UInt32 = 0
            while i < n, let h = Hex.value(text[i]).map(UInt32.init), i - start < 4 {
                value = value << 4 | h
                i += 1
            }
            if i < n, text[i] == UInt8(ascii: ".") {
                guard groups.count <= 6, let v4 = parseIPv4(text[start...]) else { return nil }
                groups.append(UInt16(v4 >> 16))
                groups.append(UInt16(v4 & 0xFFFF))
                i = n
                break
            }
            guard i > start else { return nil }
            groups.append(UInt16(value))
            if groups.count > 8 { return nil }
            if i == n { break }
            guard text[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            if i < n, text[i] == UInt8(ascii: ":") {
                guard gap == nil else { return nil }
                gap = groups.count
                i += 1
                if i == n { break }
            } else if i == n {
                return nil  // a trailing single ':'
            }
        }
        if let gap {
            // `::` stands for at least one zero group.
            guard groups.count <= 7 else { return nil }
            groups.insert(contentsOf: repeatElement(0, count: 8 - groups.count), at: gap)
        }
        guard groups.count == 8 else { return nil }
        let high = groups[0..<4].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        let low = groups[4..<8].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        return IPAddress(ipv6High: high, low: low)
    }

    private static func decimalDigit(_ b: UInt8) -> UInt32? {
        b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") ? UInt32(b - UInt8(ascii: "0")) : nil
    }
}

/// A 128-bit unsigned integer as two halves, ordered as the number: the key of an address
/// in range arithmetic (`UInt128` needs newer Apple platforms than the package supports).
struct UInt128Key: Hashable, Comparable, Sendable {
    var high: UInt64
    var low: UInt64

    static func < (a: UInt128Key, b: UInt128Key) -> Bool {
        a.high != b.high ? a.high < b.high : a.low < b.low
    }

    static let max = UInt128Key(high: .max, low: .max)

    /// `self + 1`, or `nil` at the maximum.
    var successor: UInt128Key? {
        if low != .max { return UInt128Key(high: high, low: low + 1) }
        if high != .max { return UInt128Key(high: high + 1, low: 0) }
        return nil
    }

    /// A mask of the first `prefix` bits of a 128-bit number.
    static func mask(prefix: Int) -> UInt128Key {
        func bits(_ n: Int) -> UInt64 { n <= 0 ? 0 : n >= 64 ? .max : ~(UInt64.max >> UInt64(n)) }
        return UInt128Key(high: bits(prefix), low: bits(prefix - 64))
    }

    static func & (a: UInt128Key, b: UInt128Key) -> UInt128Key { UInt128Key(high: a.high & b.high, low: a.low & b.low) }
    static func | (a: UInt128Key, b: UInt128Key) -> UInt128Key { UInt128Key(high: a.high | b.high, low: a.low | b.low) }
    static prefix func ~ (a: UInt128Key) -> UInt128Key { UInt128Key(high: ~a.high, low: ~a.low) }
}

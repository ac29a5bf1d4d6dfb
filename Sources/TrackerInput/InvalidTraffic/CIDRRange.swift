/// A block of addresses written as `address/prefix` (a data-center range of PROTOCOL.md 8, or a
/// trusted proxy): every address whose first `prefixLength` bits are those of `network`.
public struct CIDRRange: Hashable, Sendable, CustomStringConvertible {
    /// The first address of the range: the written address with its host bits cleared.
    public let network: IPAddress
    /// How many leading bits every address of the range shares: `0...32` for IPv4,
    /// `0...128` for IPv6.
    public let prefixLength: Int

    /// The range of `prefixLength` leading bits of `address`; its host bits are cleared.
    /// `nil` when the prefix is outside `0...32` (IPv4) or `0...128` (IPv6).
    ///
    /// - Parameters:
    ///   - address: any address of the range.
    ///   - prefixLength: how many leading bits the range fixes.
    public init?(address: IPAddress, prefixLength: Int) {
        guard (0...address.family.bitCount).contains(prefixLength) else { return nil }
        self.init(unchecked: address, prefixLength: prefixLength)
    }

    private init(unchecked address: IPAddress, prefixLength: Int) {
        switch address.family {
        case .v4:
            let mask: UInt32 = prefixLength == 0 ? 0 : ~(UInt32.max >> UInt32(prefixLength))
            network = IPAddress(ipv4: UInt32(truncatingIfNeeded: address.low) & mask)
        case .v6:
            let masked = address.key & UInt128Key.mask(prefix: prefixLength)
            network = IPAddress(ipv6High: masked.high, low: masked.low)
        }
        self.prefixLength = prefixLength
    }

    /// Parses `address/prefix` or a bare address (the range of that one address: `/32` or
    /// `/128`); `nil` when the text is neither (`parse(_:)` says why).
    ///
    /// Host bits set in the address are cleared, as PostgreSQL's `inet` network functions do
    /// (`10.1.2.3/8` is `10.0.0.0/8`) rather than refused as its `cidr` type would: a list
    /// copied from a provider sometimes writes a host of the block. An IPv4-mapped IPv6
    /// range with a prefix of 96 or more is the IPv4 range it maps (`::ffff:10.0.0.0/104` is
    /// `10.0.0.0/8`); see `IPAddress`.
    ///
    /// - Parameters:
    ///   - text: the range alone, no spaces.
    public init?(_ text: some StringProtocol) {
        guard let range = try? Self.parse(text) else { return nil }
        self = range
    }

    /// Parses `address/prefix` or a bare address, saying what is wrong when it is neither.
    ///
    /// - Parameters:
    ///   - text: the range alone, no spaces.
    /// - Throws: `CIDRRangeError`, whose description quotes the text and gives the rule.
    public static func parse(_ text: some StringProtocol) throws(CIDRRangeError) -> CIDRRange {
        let string = String(text)
        let parts = string.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let addressText = parts[0]
        guard let address = IPAddress(addressText) else { throw CIDRRangeError(text: string, problem: .notAnAddress) }
        // Written as IPv6: an IPv4-mapped address came back as IPv4 and its prefix counts 128 bits.
        let writtenFamily: IPAddress.Family = addressText.contains(":") ? .v6 : .v4
        guard parts.count == 2 else {
            return CIDRRange(unchecked: address, prefixLength: address.family.bitCount)
        }
        let prefixText = parts[1]
        guard (1...3).contains(prefixText.utf8.count), prefixText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let prefix = Int(prefixText), prefix <= writtenFamily.bitCount
        else {
            throw CIDRRangeError(text: string, problem: .badPrefix(writtenFamily))
        }
        if writtenFamily == .v6, address.family == .v4 {
            if prefix >= 96 { return CIDRRange(unchecked: address, prefixLength: prefix - 96) }
            // Wider than the mapped block: an IPv6 range (which never holds an IPv4 address).
            let mapped = UInt128Key(high: 0, low: 0xFFFF_0000_0000 | address.low) & UInt128Key.mask(prefix: prefix)
            return CIDRRange(unchecked: IPAddress(ipv6High: mapped.high, low: mapped.low), prefixLength: prefix)
        }
        return CIDRRange(unchecked: address, prefixLength: prefix)
    }

    /// Whether `address` is inside the range. An IPv4 address is inside IPv4 ranges only.
    ///
    /// - Parameters:
    ///   - address: the address to test.
    public func contains(_ address: IPAddress) -> Bool {
        guard address.family == network.family else { return false }
        return CIDRRange(unchecked: address, prefixLength: prefixLength).network == network
    }

    /// The first and last address of the range as 128-bit keys.
    var bounds: (first: UInt128Key, last: UInt128Key) {
        let hostMask = ~UInt128Key.mask(prefix: prefixLength + (network.family == .v4 ? 96 : 0))
        return (network.key, network.key | hostMask)
    }

    /// `network/prefixLength` in canonical text (`10.0.0.0/8`, `2001:db8::/32`).
    public var description: String { "\(network)/\(prefixLength)" }
}

/// Why a text is not a CIDR range.
public struct CIDRRangeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with a range's text.
    public enum Problem: Sendable, Equatable {
        /// The part before `/` is no IPv4 or IPv6 address.
        case notAnAddress
        /// The part after `/` is no prefix length for the family the address was written in.
        case badPrefix(IPAddress.Family)
    }

    /// The text as it was given.
    public var text: String
    /// What is wrong with it.
    public var problem: Problem

    /// The text, quoted, and the rule it breaks: `"10.0.0.0/33" is not a CIDR range (prefix
    /// 0...32 for IPv4)`.
    public var description: String {
        var quoted = ""
        JSONText.appendQuoted(text, to: &quoted)
        let rule = switch problem {
        case .notAnAddress: "an IPv4 or IPv6 address, optionally followed by /prefix"
        case .badPrefix(.v4): "prefix 0...32 for IPv4"
        case .badPrefix(.v6): "prefix 0...128 for IPv6"
        }
        return "\(quoted) is not a CIDR range (\(rule))"
    }
}

/// The client's address behind trusted proxies, from `X-Forwarded-For` (PROTOCOL.md 8).
///
/// Each proxy appends the address it received the request from, so the header reads
/// `client, proxy1, proxy2` and the peer is the last proxy. Only the right-hand part, written
/// by proxies the operator trusts, says anything for sure: everything to the left of the
/// first untrusted address was written by whoever sent the request.
public enum ForwardedFor {
    /// The most of the header that is read: its last 8 KiB (the left part is the client's
    /// own and may be arbitrarily long).
    public static let maxHeaderBytes = 8 << 10
    /// The most entries read, from the right.
    public static let maxEntries = 64

    /// The client's address: the right-most address of `header` that is not a trusted proxy,
    /// when the request came from one; else the peer.
    ///
    /// - The header is read only when `peer` is inside `trustedProxies`; otherwise, or when it
    ///   is absent or blank, the client is `peer`.
    /// - Entries are separated by commas (the caller joins several header lines with commas,
    ///   in order); spaces and tabs around an entry are ignored, and so is an empty entry.
    /// - An entry is an address (`IPAddress`, so `::ffff:a.b.c.d` is `a.b.c.d`), an IPv4
    ///   address with a port (`192.0.2.1:8080`) or a bracketed IPv6 one with or without a port
    ///   (`[2001:db8::1]:8080`); the port is dropped (some proxies write it). An unbracketed
    ///   IPv6 text is read as an address, never as address and port.
    /// - Walking from the right, an entry that is none of these (`unknown`, an obfuscated
    ///   name, a broken text) stops the walk: the client is the nearest address already known,
    ///   the trusted hop to its right or else the peer. Nothing left of it can be trusted.
    /// - When every entry read is a trusted proxy, the client is the left-most one read.
    /// - Only the last `maxHeaderBytes` bytes and the last `maxEntries` entries are read; an
    ///   entry cut by the byte limit is not read.
    ///
    /// - Parameters:
    ///   - peer: the address the connection came from.
    ///   - header: the `X-Forwarded-For` lines joined with commas, or `nil`.
    ///   - trustedProxies: `TRACKER_TRUSTED_PROXIES` (see `trustedProxies(_:)`).
    public static func client(peer: IPAddress, header: String?, trustedProxies: IPRangeSet) -> IPAddress {
        guard let header, trustedProxies.contains(peer) else { return peer }
        var utf8 = header.utf8[...]
        var cut = false
        if utf8.count > maxHeaderBytes {
            utf8 = utf8.suffix(maxHeaderBytes)
            cut = true
        }
        var known = peer
        var entries = 0
        var end = utf8.endIndex
        while entries < maxEntries {
            let start = utf8[..<end].lastIndex(of: UInt8(ascii: ",")).map { utf8.index(after: $0) }
            // The left-most entry of a cut header may have lost its beginning.
            if start == nil, cut { return known }
            let entry = utf8[(start ?? utf8.startIndex)..<end]
            if let address = address(in: entry) {
                entries += 1
                guard trustedProxies.contains(address) else { return address }
                known = address
            } else if !isBlank(entry) {
                return known
            }
            guard let start else { return known }
            end = utf8.index(before: start)
        }
        return known
    }

    private static func isBlank(_ entry: Substring.UTF8View.SubSequence) -> Bool {
        entry.allSatisfy { $0 == 0x20 || $0 == 0x09 }
    }

    /// The address an entry names: trimmed of spaces and tabs, a port and brackets dropped.
    static func address(in entry: Substring.UTF8View.SubSequence) -> IPAddress? {
        var text = Substring(entry)
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        guard !text.isEmpty, text.utf8.count <= 64 else { return nil }
        if text.first == "[" {
            // [v6] or [v6]:port
            guard let close = text.firstIndex(of: "]") else { return nil }
            let rest = text[text.index(after: close)...]
            guard rest.isEmpty || isPort(rest) else { return nil }
            let inside = text[text.index(after: text.startIndex)..<close]
            guard inside.contains(":"), let address = IPAddress(inside) else { return nil }
            return address
        }
        if let address = IPAddress(text) { return address }
        // a.b.c.d:port
        guard let colon = text.firstIndex(of: ":"), isPort(text[colon...]),
              let address = IPAddress(text[..<colon]), !text[..<colon].contains(":")
        else { return nil }
        return address
    }

    /// `:` and a port number, 0 to 65535.
    private static func isPort(_ text: Substring) -> Bool {
        let digits = text.dropFirst()
        guard text.first == ":", (1...5).contains(digits.count), digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let port = Int(digits), port <= 65535
        else { return false }
        return true
    }

    /// Reads `TRACKER_TRUSTED_PROXIES`: ranges or addresses separated by commas (spaces around
    /// each ignored, empty entries too); an empty text trusts no proxy.
    ///
    /// - Parameters:
    ///   - text: the variable's value, e.g. `10.0.0.0/8, 2001:db8::/32, 192.0.2.7`.
    /// - Throws: `TrustedProxiesError` naming the first entry that is not a range.
    public static func trustedProxies(_ text: String) throws(TrustedProxiesError) -> IPRangeSet {
        var ranges: [CIDRRange] = []
        for (i, raw) in text.split(separator: ",", omittingEmptySubsequences: false).enumerated() {
            let entry = raw.trimmingBlanks()
            guard !entry.isEmpty else { continue }
            do {
                ranges.append(try CIDRRange.parse(entry))
            } catch {
                throw TrustedProxiesError(index: i, error: error)
            }
        }
        return IPRangeSet(ranges)
    }
}

/// Why `TRACKER_TRUSTED_PROXIES` cannot be read: which entry, and what is wrong with it.
public struct TrustedProxiesError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The entry's position among the comma-separated ones, from 0.
    public var index: Int
    /// What is wrong with it (quoting it).
    public var error: CIDRRangeError

    /// `TRACKER_TRUSTED_PROXIES entry 1: "10.0.0.0/33" is not a CIDR range (prefix 0...32 for IPv4)`.
    public var description: String { "TRACKER_TRUSTED_PROXIES entry \(index): \(error)" }
}

extension Substring {
    /// The text without spaces and tabs at either end.
    fileprivate func trimmingBlanks() -> Substring {
        var s = self
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return s
    }
}

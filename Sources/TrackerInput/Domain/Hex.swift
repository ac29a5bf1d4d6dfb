/// Hexadecimal digits and percent-encoding, read in one place (UUIDs, JSON's `\u` escapes,
/// query strings, path segments).
public enum Hex {
    /// The value of one hex digit (either case); `nil` for any other byte.
    @inline(__always)
    public static func value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte &- UInt8(ascii: "A") &+ 10
        default: nil
        }
    }

    /// The lower-case digit of `value` (0 to 15).
    @inline(__always)
    public static func digit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") &+ value : UInt8(ascii: "a") &+ value &- 10
    }
}

/// Percent-decoding (RFC 3986 2.1) of a URL component's bytes.
public enum PercentDecoding {
    /// How `%` not followed by two hex digits is read.
    public enum Malformed: Sendable {
        /// Kept as the bytes it is (what browsers and most servers do for a query string).
        case literal
        /// The whole component is refused (`decode` returns `nil`).
        case refused
    }

    /// The bytes `text` stands for.
    ///
    /// - Parameters:
    ///   - text: the component as it arrived, still encoded.
    ///   - plusIsSpace: read `+` as a space (HTML form encoding, used in query strings).
    ///   - malformed: what a `%` without two hex digits after it does.
    public static func decode(_ text: some StringProtocol, plusIsSpace: Bool, malformed: Malformed) -> [UInt8]? {
        var out: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.popFirst() {
            if b == UInt8(ascii: "%") {
                if utf8.count >= 2, let high = Hex.value(utf8[utf8.startIndex]), let low = Hex.value(utf8[utf8.startIndex + 1]) {
                    out.append(high << 4 | low)
                    utf8 = utf8.dropFirst(2)
                    continue
                }
                if malformed == .refused { return nil }
            }
            out.append(plusIsSpace && b == UInt8(ascii: "+") ? UInt8(ascii: " ") : b)
        }
        return out
    }
}

import Crypto

/// The SHA-256 digest of an API key: what `api_keys.key_hash` stores and what lookups compare.
///
/// Computed here, not by PostgreSQL's `sha256()`, so a presented key never travels to the
/// database and never appears in its statement log (`log_min_duration_statement = 0` wrote
/// every key, valid or not, in plain text). Equality takes the same time whatever the bytes.
struct KeyDigest: Hashable, Sendable {
    let bytes: [UInt8]

    init(key: String) {
        bytes = Array(SHA256.hash(data: Array(key.utf8)))
    }

    init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// `\x…`, PostgreSQL's hex text form of a `bytea`.
    var byteaText: String {
        let hex = Array("0123456789abcdef".utf8)
        var out: [UInt8] = Array(#"\x"#.utf8)
        for b in bytes { out.append(hex[Int(b >> 4)]); out.append(hex[Int(b & 0x0F)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads `\x…` (a `bytea` as text).
    init?(byteaText text: String) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 66, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x") else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(32)
        var i = 2
        while i < 66 {
            guard let high = nibble(utf8[i]), let low = nibble(utf8[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        bytes = out
    }

    /// Constant time: every byte is compared, whatever differs first.
    static func == (lhs: KeyDigest, rhs: KeyDigest) -> Bool {
        guard lhs.bytes.count == rhs.bytes.count else { return false }
        var difference: UInt8 = 0
        for i in lhs.bytes.indices { difference |= lhs.bytes[i] ^ rhs.bytes[i] }
        return difference == 0
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(bytes)
    }
}

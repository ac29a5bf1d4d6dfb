import Foundation

/// UUIDv7 (RFC 9562), made on the device when the app records the event.
///
/// The 48-bit Unix millisecond time comes first, then the microseconds within that millisecond
/// in `rand_a` (RFC 9562 section 6.2, method 3), so ids sort by when they were made; the last
/// 62 bits are random. The server stores an id at most once, so a retry can never double an
/// event and two devices never collide.
enum EventID {
    static func make(wallMicros: Int64) -> UUID {
        var random = SystemRandomNumberGenerator()
        let millis = UInt64(max(0, wallMicros / 1_000))
        let subMillis = UInt64(max(0, wallMicros % 1_000)) * 4096 / 1000
        let tail = random.next() as UInt64
        return UUID(uuid: (
            UInt8(truncatingIfNeeded: millis >> 40), UInt8(truncatingIfNeeded: millis >> 32),
            UInt8(truncatingIfNeeded: millis >> 24), UInt8(truncatingIfNeeded: millis >> 16),
            UInt8(truncatingIfNeeded: millis >> 8), UInt8(truncatingIfNeeded: millis),
            0x70 | UInt8(truncatingIfNeeded: subMillis >> 8), UInt8(truncatingIfNeeded: subMillis),
            0x80 | UInt8(truncatingIfNeeded: tail >> 56) & 0x3F, UInt8(truncatingIfNeeded: tail >> 48),
            UInt8(truncatingIfNeeded: tail >> 40), UInt8(truncatingIfNeeded: tail >> 32),
            UInt8(truncatingIfNeeded: tail >> 24), UInt8(truncatingIfNeeded: tail >> 16),
            UInt8(truncatingIfNeeded: tail >> 8), UInt8(truncatingIfNeeded: tail)))
    }

    /// The 36-character lowercase form the wire uses.
    static func appendText(_ id: UUID, to out: inout [UInt8]) {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        withUnsafeBytes(of: id.uuid) { bytes in
            for (i, byte) in bytes.enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0x0F)])
            }
        }
    }
}

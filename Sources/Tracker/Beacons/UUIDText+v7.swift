extension UUIDText {
    /// A new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits, so ids the
    /// server makes for beacons sort by time and keep the log's id index right-leaning as
    /// the ids apps make do.
    static func v7(at time: Timestamp) -> UUIDText {
        var random = SystemRandomNumberGenerator()
        let millis = UInt64(max(0, time.microseconds / 1_000))
        let a = random.next() as UInt64
        let b = random.next() as UInt64
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
        bytes[6] = 0x70 | UInt8(truncatingIfNeeded: a >> 60)
        bytes[7] = UInt8(truncatingIfNeeded: a >> 52)
        bytes[8] = 0x80 | UInt8(truncatingIfNeeded: b >> 58) & 0x3F
        for i in 9..<16 { bytes[i] = UInt8(truncatingIfNeeded: b >> (8 * UInt64(15 - i))) }
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(36)
        for (i, byte) in bytes.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return UUIDText(String(decoding: text, as: UTF8.self))!  // 36 characters of the alphabet UUIDText takes
    }
}

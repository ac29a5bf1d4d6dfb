extension PackedUUID {
    /// A new UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits, so ids the
    /// server makes for beacons sort by time and keep the log's id index right-leaning as
    /// the ids apps make do.
    static func v7(at time: Timestamp) -> PackedUUID {
        var random = SystemRandomNumberGenerator()
        let millis = UInt64(max(0, time.microseconds / 1_000))
        let a = random.next() as UInt64
        let b = random.next() as UInt64
        // 48 bits of milliseconds, version 7, 12 random bits; variant 10, 62 random bits.
        let high = (millis & 0xFFFF_FFFF_FFFF) << 16 | 0x7000 | (a >> 52)
        let low = 0x8000_0000_0000_0000 | (b >> 2)
        return PackedUUID(high: high, low: low)
    }
}

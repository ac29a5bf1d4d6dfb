extension Array where Element == UInt8 {
    /// Appends `value` in network byte order (big-endian), as PostgreSQL's binary formats and the
    /// tracker's own packed values store integers.
    @inlinable
    public mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}

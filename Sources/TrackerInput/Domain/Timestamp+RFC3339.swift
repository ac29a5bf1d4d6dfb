extension Timestamp {
    /// Parses an RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    ///
    /// `T` and `Z` may be lower case (RFC 3339, 5.6). The fraction may have any number of
    /// digits; digits past the sixth are dropped (truncated toward the earlier microsecond),
    /// the precision PostgreSQL keeps. A leap second (`:60`, which RFC 3339 allows at the end
    /// of any minute) is read as `:59.999999`, the last microsecond of that minute: PostgreSQL
    /// has no leap seconds, and this keeps the event in its minute, its day and its order
    /// before the next second (its own fraction is dropped). Dates that do not exist are refused.
    public init?(rfc3339 text: some StringProtocol) {
        var utf8 = text.utf8.makeIterator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(35)
        while let b = utf8.next() { bytes.append(b) }
        guard bytes.count >= 20,
              bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              let year = Day.digits(bytes[0..<4]), let month = Day.digits(bytes[5..<7]),
              let dayOfMonth = Day.digits(bytes[8..<10]),
              let hour = Day.digits(bytes[11..<13]), let minute = Day.digits(bytes[14..<16]),
              let second = Day.digits(bytes[17..<19]),
              hour <= 23, minute <= 59, second <= 60,
              let day = Day(year: year, month: month, day: dayOfMonth)
        else { return nil }

        var i = 19
        var micros: Int64 = 0
        if bytes[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            var scale: Int64 = 100_000
            while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9") {
                micros += Int64(bytes[i] - UInt8(ascii: "0")) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        guard i < bytes.count else { return nil }

        var offsetSeconds: Int64 = 0
        switch bytes[i] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            i += 1
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard bytes.count == i + 6, bytes[i + 3] == UInt8(ascii: ":"),
                  let h = Day.digits(bytes[(i + 1)..<(i + 3)]), let m = Day.digits(bytes[(i + 4)..<(i + 6)]),
                  h <= 23, m <= 59
            else { return nil }
            offsetSeconds = Int64(h * 3600 + m * 60) * (bytes[i] == UInt8(ascii: "-") ? -1 : 1)
            i += 6
        default:
            return nil
        }
        guard i == bytes.count else { return nil }

        if second == 60 { micros = Timestamp.microsecondsPerSecond - 1 }  // the leap second: :59.999999
        let local = day.start.microseconds
            + Int64(hour * 3600 + minute * 60 + min(second, 59)) * Timestamp.microsecondsPerSecond + micros
        self.init(microseconds: local - offsetSeconds * Timestamp.microsecondsPerSecond)
    }
}

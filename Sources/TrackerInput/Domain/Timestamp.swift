#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An instant in UTC with microsecond precision, as PostgreSQL's `timestamptz` keeps it.
///
/// Stored as microseconds since 1970-01-01T00:00:00Z so that ordering, differences
/// and day arithmetic are integer operations on the hot path.
public struct Timestamp: Hashable, Comparable, Sendable {
    public var microseconds: Int64

    public init(microseconds: Int64) {
        self.microseconds = microseconds
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.microseconds < rhs.microseconds
    }

    public static func + (lhs: Timestamp, rhs: Duration) -> Timestamp {
        Timestamp(microseconds: lhs.microseconds + rhs.microseconds)
    }

    public static func - (lhs: Timestamp, rhs: Duration) -> Timestamp {
        Timestamp(microseconds: lhs.microseconds - rhs.microseconds)
    }

    /// The signed duration from `rhs` to `lhs`.
    public static func - (lhs: Timestamp, rhs: Timestamp) -> Duration {
        .microseconds(lhs.microseconds - rhs.microseconds)
    }

    /// The UTC day this instant falls on.
    public var day: Day {
        Day(daysSinceEpoch: Int32(Self.floorDiv(microseconds, Self.microsecondsPerDay)))
    }

    public static let microsecondsPerSecond: Int64 = 1_000_000
    public static let microsecondsPerDay: Int64 = 86_400 * 1_000_000

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }
}

extension Duration {
    /// Whole microseconds of this duration (truncated toward zero).
    public var microseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }

    /// Whole nanoseconds of this duration (truncated toward zero), as timers record them.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }
}

/// A UTC calendar day, the unit every report groups by.
public struct Day: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var daysSinceEpoch: Int32

    public init(daysSinceEpoch: Int32) {
        self.daysSinceEpoch = daysSinceEpoch
    }

    /// The day of a proleptic Gregorian date; `nil` when the date does not exist.
    public init?(year: Int, month: Int, day: Int) {
        guard (1...9999).contains(year), (1...12).contains(month),
              (1...Day.daysIn(month: month, year: year)).contains(day)
        else { return nil }
        self.daysSinceEpoch = Int32(CivilCalendar.days(year: year, month: month, day: day))
    }

    /// Parses `YYYY-MM-DD`.
    public init?(iso text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        guard utf8.count == 10, utf8[4] == UInt8(ascii: "-"), utf8[7] == UInt8(ascii: "-"),
              let y = Day.digits(utf8[0..<4]), let m = Day.digits(utf8[5..<7]), let d = Day.digits(utf8[8..<10])
        else { return nil }
        self.init(year: y, month: m, day: d)
    }

    public static func < (lhs: Day, rhs: Day) -> Bool {
        lhs.daysSinceEpoch < rhs.daysSinceEpoch
    }

    public var start: Timestamp {
        Timestamp(microseconds: Int64(daysSinceEpoch) * Timestamp.microsecondsPerDay)
    }

    public func adding(days: Int) -> Day {
        Day(daysSinceEpoch: daysSinceEpoch + Int32(days))
    }

    public var civil: (year: Int, month: Int, day: Int) {
        CivilCalendar.date(days: Int(daysSinceEpoch))
    }

    /// `YYYY-MM-DD`.
    public var description: String {
        let (y, m, d) = civil
        var out = ""
        out.reserveCapacity(10)
        Day.appendPadded(y, width: 4, to: &out)
        out.append("-")
        Day.appendPadded(m, width: 2, to: &out)
        out.append("-")
        Day.appendPadded(d, width: 2, to: &out)
        return out
    }

    static func digits(_ bytes: ArraySlice<UInt8>) -> Int? {
        var value = 0
        for b in bytes {
            guard b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(b - UInt8(ascii: "0"))
        }
        return value
    }

    static func appendPadded(_ value: Int, width: Int, to out: inout String) {
        let s = String(value)
        if s.count < width { out.append(String(repeating: "0", count: width - s.count)) }
        out.append(s)
    }

    static func isLeap(_ year: Int) -> Bool {
        (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

/// A UTC quarter hour, the unit the projections count in: every local day and local hour of
/// every time zone in use since 1980 is a whole number of them (all offsets are multiples of
/// 15 minutes), so a report in any zone is a sum of quarter hours.
public struct QuarterHour: Hashable, Comparable, Sendable {
    /// Quarter hours since 1970-01-01T00:00Z.
    public var index: Int32

    public static let microseconds: Int64 = 900 * 1_000_000
    public static let perDay: Int32 = 96

    public init(index: Int32) {
        self.index = index
    }

    /// The quarter hour `instant` falls in.
    public init(_ instant: Timestamp) {
        index = Int32(Timestamp.floorDiv(instant.microseconds, Self.microseconds))
    }

    public static func < (lhs: QuarterHour, rhs: QuarterHour) -> Bool {
        lhs.index < rhs.index
    }

    /// The UTC day the quarter hour belongs to.
    public var day: Day {
        Day(daysSinceEpoch: Int32(Timestamp.floorDiv(Int64(index), Int64(Self.perDay))))
    }

    public var start: Timestamp {
        Timestamp(microseconds: Int64(index) * Self.microseconds)
    }
}

extension Timestamp: CustomStringConvertible {
    /// RFC 3339 in UTC with six fractional digits, e.g. `2026-11-20T10:00:01.950000Z`.
    public var description: String {
        rfc3339
    }

    public var rfc3339: String {
        var out = ""
        out.reserveCapacity(27)
        appendFormatted(to: &out, dateTimeSeparator: "T", zone: "Z")
        return out
    }

    /// The text form PostgreSQL reads back exactly as a `timestamptz`.
    public var postgresText: String {
        var out = ""
        out.reserveCapacity(32)
        appendFormatted(to: &out, dateTimeSeparator: " ", zone: "+00")
        return out
    }

    func appendFormatted(to out: inout String, dateTimeSeparator: Character, zone: String) {
        let days = Timestamp.floorDiv(microseconds, Timestamp.microsecondsPerDay)
        var rest = microseconds - days * Timestamp.microsecondsPerDay
        let (y, m, d) = CivilCalendar.date(days: Int(days))
        Day.appendPadded(y, width: 4, to: &out)
        out.append("-")
        Day.appendPadded(m, width: 2, to: &out)
        out.append("-")
        Day.appendPadded(d, width: 2, to: &out)
        out.append(dateTimeSeparator)
        let hour = rest / 3_600_000_000
        rest -= hour * 3_600_000_000
        let minute = rest / 60_000_000
        rest -= minute * 60_000_000
        let second = rest / 1_000_000
        let micro = rest - second * 1_000_000
        Day.appendPadded(Int(hour), width: 2, to: &out)
        out.append(":")
        Day.appendPadded(Int(minute), width: 2, to: &out)
        out.append(":")
        Day.appendPadded(Int(second), width: 2, to: &out)
        out.append(".")
        Day.appendPadded(Int(micro), width: 6, to: &out)
        out.append(zone)
    }
}

extension Timestamp {
    /// The server's wall clock, the `receivedAt` of a batch.
    public static func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(microseconds: Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1_000)
    }
}

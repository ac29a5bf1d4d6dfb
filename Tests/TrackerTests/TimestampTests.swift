import Testing
@testable import Tracker
@testable import TrackerInput

struct TimestampTests {
    @Test func dayOfAnInstantIsItsUTCCalendarDay() {
        let justBeforeMidnight = Timestamp(microseconds: Day(year: 2026, month: 11, day: 20)!.start.microseconds - 1)
        #expect(justBeforeMidnight.day.description == "2026-11-19")
        #expect(Day(year: 2026, month: 11, day: 20)!.start.day.description == "2026-11-20")
    }

    @Test func instantsBeforeTheEpochFallOnTheRightDay() {
        #expect(Timestamp(microseconds: -1).day.description == "1969-12-31")
    }

    @Test func formatsWithMicrosecondsInUTC() {
        let t = Timestamp(microseconds: Day(year: 2024, month: 2, day: 29)!.start.microseconds + 3_723_000_450)
        #expect(t.rfc3339 == "2024-02-29T01:02:03.000450Z")
        #expect(t.postgresText == "2024-02-29 01:02:03.000450+00")
    }

    /// RFC 3339 allows a leap second; PostgreSQL has none, so `:60` is the minute's last microsecond.
    @Test func aLeapSecondIsTheLastMicrosecondOfItsMinute() {
        #expect(Timestamp(rfc3339: "2016-12-31T23:59:60Z")?.rfc3339 == "2016-12-31T23:59:59.999999Z")
        #expect(Timestamp(rfc3339: "2016-12-31T23:59:60.5Z")?.rfc3339 == "2016-12-31T23:59:59.999999Z")
        #expect(Timestamp(rfc3339: "2016-12-31T15:59:60-08:00")?.rfc3339 == "2016-12-31T23:59:59.999999Z")
        #expect(Timestamp(rfc3339: "2016-12-31T23:59:61Z") == nil)
    }

    /// The protocol: RFC 3339, whose fraction has any number of digits; past the sixth they are dropped.
    @Test func aFractionOfAnyLengthIsTruncatedToTheMicrosecond() {
        let digits = "123456" + String(repeating: "9", count: 994)
        #expect(Timestamp(rfc3339: "2026-11-20T10:00:01.\(digits)Z")?.rfc3339 == "2026-11-20T10:00:01.123456Z")
        #expect(Timestamp(rfc3339: "2026-11-20T10:00:01.\(String(repeating: "0", count: 60))+01:00")?.rfc3339 == "2026-11-20T09:00:01.000000Z")
    }

    @Test func parsesOnlyRealDates() {
        #expect(Day(iso: "2026-02-29") == nil)
        #expect(Day(iso: "2024-02-29") != nil)
        #expect(Day(iso: "2026-13-01") == nil)
        #expect(Day(iso: "2026-1-01") == nil)
        #expect(Day(iso: "2026-11-20")?.description == "2026-11-20")
    }

    @Test func civilConversionRoundTripsOverCenturies() {
        for days in stride(from: -800_000, through: 2_900_000, by: 997) {
            let (y, m, d) = CivilCalendar.date(days: days)
            #expect(CivilCalendar.days(year: y, month: m, day: d) == days)
        }
    }
}

struct PackedUUIDTests {
    @Test func upperCaseUUIDIsStoredLowerCase() {
        #expect(PackedUUID("0192F3A4-7B1C-7C3E-9A10-5F2D8E0C4B11")?.text == "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11")
    }

    @Test func malformedUUIDsAreRefused() {
        #expect(PackedUUID("0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b1") == nil)
        #expect(PackedUUID("0192f3a47b1c-7c3e-9a10-5f2d8e0c4b11a") == nil)
        #expect(PackedUUID("0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b1g") == nil)
        #expect(PackedUUID("0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11-") == nil)
        #expect(PackedUUID("0192f3a4_7b1c-7c3e-9a10-5f2d8e0c4b11") == nil)
        #expect(PackedUUID("") == nil)
    }

    /// The protocol breaks ties by "the smaller event id as a string": the 16-byte order must be the text's.
    @Test func idsOrderAsTheirTextAndReadBackTheSame() {
        var random = SystemRandomNumberGenerator()
        let ids = (0..<2_000).map { i -> PackedUUID in
            // Some share their first half, so the second decides.
            let high = i % 3 == 0 ? 0x0192_f3a4_7b1c_7c3e : random.next() as UInt64
            return PackedUUID(high: high, low: random.next())
        }
        for id in ids {
            #expect(PackedUUID(id.text) == id)
            #expect(PackedUUID(id.text.uppercased()) == id)
        }
        #expect(ids.sorted().map(\.text) == ids.map(\.text).sorted())
        let id = PackedUUID("00112233-4455-6677-8899-aabbccddeeff")!
        #expect((0..<16).map { id.byte($0) } == [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff])
    }
}

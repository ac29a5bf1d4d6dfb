import Foundation
import Testing
import Tracker

/// Reports in local days and hours of any zone: against an independent computation (Foundation's
/// zones, not PostgreSQL's) over streams that cross daylight-saving changes and midnights of
/// half- and quarter-hour zones, delivered shuffled with retries, incrementally and after a rebuild.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct TimeZoneReportTests {
    /// Instants where a zone's days or hours are hardest to cut.
    static let edges: [Timestamp] = [
        utc(2026, 11, 1, 6, 0),    // New York falls back: 02:00 EDT -> 01:00 EST
        utc(2026, 3, 8, 7, 0),     // New York springs forward: 02:00 EST -> 03:00 EDT (a 23-hour day)
        utc(2026, 4, 4, 16, 30),   // Adelaide falls back: 03:00 ACDT -> 02:00 ACST (a 25-hour day)
        utc(2026, 10, 3, 16, 30),  // Adelaide springs forward: 02:00 ACST -> 03:00 ACDT
        utc(2026, 11, 2, 18, 15),  // midnight in Kathmandu (+05:45)
        utc(2026, 11, 2, 18, 30),  // midnight in Kolkata (+05:30)
    ]
    static let zones = ["UTC", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Adelaide"]
    /// Local days covering every edge above in every zone.
    static let from = Day(year: 2026, month: 3, day: 6)!, days = 245

    static func utc(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int) -> Timestamp {
        Day(year: y, month: mo, day: d)!.start + .seconds(h * 3600 + mi * 60)
    }

    func expectReference(_ db: TestDatabase, _ events: [TrackingEvent], _ what: String) async throws {
        for zone in Self.zones {
            for granularity in ReportGranularity.allCases {
                let expected = ReferenceReports.csv(events, clock: .init(zone, hourly: granularity == .hour))
                let got = try await db.reportsAsCSV(days: Self.days, from: Self.from, timeZone: zone, granularity: granularity)
                for (name, csv) in expected {
                    #expect(got[name] == csv, "\(what): \(name) in \(zone) by \(granularity)")
                }
            }
        }
    }

    @Test func everyReportInFiveZonesByDayAndHourMatchesTheReferenceIncrementallyAndAfterRebuild() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 7)
            let events = RandomTraffic.events(ads: 150, around: Self.edges, spread: 4 * 3600, using: &g)
            let projector = db.projector(batchSize: 40)
            for chunk in RandomTraffic.deliveries(of: events, chunks: 6, using: &g) {
                try await db.append(chunk)
                for _ in 0..<Int.random(in: 0...2, using: &g) { try await projector.step() }
            }
            try await projector.catchUp()
            try await expectReference(db, events, "incremental")
            try await expectRebuildReproducesTheProjections(db)
            try await expectReference(db, events, "after rebuild")
        }
    }

    /// The repeated hour of New York's fall-back day is two rows, 01:00 at -04:00 and at -05:00;
    /// that day has 25 hours, and its summary by day counts all of them.
    @Test func theRepeatedHourOfAFallBackDayIsTwoRowsWithTheirOffsets() async throws {
        try await withTestDatabase { db in
            let first = Self.utc(2026, 11, 1, 5, 30), second = Self.utc(2026, 11, 1, 6, 30)  // 01:30 EDT, 01:30 EST
            let ads = (0..<25).map { h in Events.make(.impression, ad: "h\(h)", at: Self.utc(2026, 11, 1, 4, 10) + .seconds(h * 3600)) }
            try await db.append(ads + [Events.make(.impression, ad: "edt", at: first), Events.make(.impression, ad: "est", at: second)])
            try await db.projector().catchUp()
            let day = Day(year: 2026, month: 11, day: 1)!
            let reports = Reports(pool: db.pool)
            let hourly = try await reports.run(try ReportQuery(kind: .summary, from: day, to: day, timeZone: "America/New_York",
                                                              granularity: .hour))
            let hours = hourly.rows.map { row -> String in if case .text(let h) = row[1] { h } else { "" } }
            #expect(hours.count == 25, "a fall-back day has 25 hours: \(hours)")
            #expect(hours.contains("2026-11-01T01:00:00-04:00") && hours.contains("2026-11-01T01:00:00-05:00"))
            #expect(hours.first == "2026-11-01T00:00:00-04:00" && hours.last == "2026-11-01T23:00:00-05:00")
            let daily = try await reports.run(try ReportQuery(kind: .summary, from: day, to: day, timeZone: "America/New_York"))
            #expect(daily.rows.count == 1)
            #expect(daily.rows.first?[3] == .count(27), "every ad whose impression falls on the local day, and only those")
        }
    }

    /// St. John's fell back across midnight until 2011 (00:01 NDT became 23:01 NST of the day
    /// before, at 02:31 UTC): the old day's last hour comes again after the new day began, and
    /// every event still counts on its own local day only, by day and by hour.
    @Test func aZoneThatFellBackAcrossMidnightCountsEveryEventOnItsOwnDay() async throws {
        try await withTestDatabase { db in
            // 23:50 NDT and 23:20, 23:40 NST on the 28th; 00:10 and 01:20 NST on the 29th. (The
            // quarter hour of the change, 02:30 UTC, is left out: it starts at 00:00 NDT on the
            // 29th, where its events after 02:31 are, by the clock, on the 28th.)
            let times = [Self.utc(2006, 10, 29, 2, 20), Self.utc(2006, 10, 29, 2, 50), Self.utc(2006, 10, 29, 3, 10),
                         Self.utc(2006, 10, 29, 3, 40), Self.utc(2006, 10, 29, 4, 50)]
            let events = times.enumerated().map { i, at in Events.make(.impression, ad: "s\(i)", at: at) }
            try await db.append(events)
            try await db.projector().catchUp()
            for granularity in ReportGranularity.allCases {
                let expected = ReferenceReports.csv(events, clock: .init("America/St_Johns", hourly: granularity == .hour))
                let got = try await db.reportsAsCSV(days: 3, from: Day(year: 2006, month: 10, day: 27)!, timeZone: "America/St_Johns",
                                                    granularity: granularity)
                #expect(!expected.isEmpty && got == expected, "every report by \(granularity)")
            }
            let day = try await Reports(pool: db.pool).run(try ReportQuery(kind: .summary, from: Day(year: 2006, month: 10, day: 28)!,
                                                                          to: Day(year: 2006, month: 10, day: 29)!, timeZone: "America/St_Johns"))
            #expect(day.rows.map { $0[3] } == [.count(3), .count(2)], "three impressions on the 28th and two on the 29th")
        }
    }

    /// Two ad units whose names are the same text to Swift but not the same bytes (é, and e with
    /// a combining accent) are two rows in every zone, as in UTC, in bytewise order: the
    /// projector's rows (`ProjectionKey`) and the reports keep values apart by their bytes, as
    /// PostgreSQL does, though Swift's `String ==` calls the two equal. (Ads themselves are
    /// still grouped by their request id as a Swift `String`: two request ids that differ only
    /// in normalisation are one ad, a known gap; Ad Manager's request ids are ASCII.)
    @Test func adUnitsThatDifferOnlyInTheirBytesAreTwoRowsInEveryZone() async throws {
        try await withTestDatabase { db in
            let composed = "/6499/caf\u{E9}", decomposed = "/6499/cafe\u{301}"
            let at = Self.utc(2026, 11, 10, 15, 0)
            try await db.append([Events.make(.impression, ad: "a", at: at, adUnit: composed),
                                 Events.make(.impression, ad: "b", at: at, adUnit: decomposed),
                                 Events.make(.impression, ad: "c", at: at, adUnit: decomposed)])
            try await db.projector().catchUp()
            let day = Day(year: 2026, month: 11, day: 10)!
            let reports = Reports(pool: db.pool)
            for zone in ["UTC", "America/New_York", "Asia/Kolkata"] {
                for granularity in [ReportGranularity.day, .hour] where !(zone == "UTC" && granularity == .hour) {
                    let report = try await reports.run(try ReportQuery(kind: .summary, from: day, to: day, timeZone: zone, granularity: granularity))
                    let units = report.rows.map { row -> String in if case .text(let u) = row[granularity == .hour ? 2 : 1] { u } else { "" } }
                    #expect(units.map { Array($0.utf8) } == [Array(decomposed.utf8), Array(composed.utf8)], "\(zone) by \(granularity)")
                    let impressions = report.rows.map { $0[granularity == .hour ? 4 : 3] }
                    #expect(impressions == [.count(2), .count(1)], "\(zone) by \(granularity)")
                }
            }
        }
    }

    /// Without `tz` (or with `tz=UTC`) and by day, every report is what it was before time
    /// zones: the same bytes, read from the day tables.
    @Test func utcByDayIsTheReportOfUTCDays() async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: 3)
            let events = RandomTraffic.events(ads: 60, using: &g)
            try await db.append(events)
            try await db.projector().catchUp()
            let plain = try await db.reportsAsCSV()
            #expect(plain == ReferenceReports.csv(events))
            #expect(try await db.reportsAsCSV(timeZone: "Etc/UTC") == plain, "another name of UTC")
            let reports = Reports(pool: db.pool)
            let q = try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0.adding(days: 1))
            #expect(try await reports.run(q).json.hasPrefix("{\"from\":\"\(Events.day0)\",\"to\":\"\(Events.day0.adding(days: 1))\",\"ivtRules\":0,\"rows\":["))
            var hourly = q
            hourly.granularity = .hour
            let json = try await reports.run(hourly).json
            #expect(json.contains("\"tz\":\"UTC\",\"granularity\":\"hour\""))
            #expect(json.contains("T00:00:00Z\""), "UTC hours are written with Z: \(json.prefix(300))")
        }
    }

    @Test func anUnknownZoneIsRefusedNamingTz() async throws {
        try await withTestDatabase { db in
            let reports = Reports(pool: db.pool)
            for bad in ["Mars/Olympus_Mons", "America/New York", "../etc/passwd", "EST5EDT,M3.2.0,M11.1.0"] {
                await #expect(throws: ReportQueryError.self, "\(bad)") {
                    _ = try await reports.run(try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0, timeZone: bad))
                }
            }
            let lower = try await reports.run(try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0,
                                                              timeZone: "america/new_york"))
            #expect(lower.query.timeZone == "America/New_York", "names are matched as PostgreSQL does, and echoed as the tz database spells them")
        }
    }

    /// Projections made before the quarter-hour tables existed answer UTC days, and refuse
    /// other zones with the advice to rebuild, which then makes them work.
    @Test func projectionsWithoutQuarterHoursAskForARebuild() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.impression, ad: "old", at: Events.at(10))])
            try await db.projector().catchUp()
            try await db.pool.withConnection { try $0.execute("UPDATE projection_state SET quarter_hours_complete = false") }
            let reports = Reports(pool: db.pool)
            _ = try await reports.run(try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0))
            await #expect(throws: ReportError.quarterHoursMissing) {
                _ = try await reports.run(try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0, timeZone: "Asia/Kolkata"))
            }
            try await Rebuild(pool: db.pool, logger: TestEnvironment.logger).run()
            let local = try await reports.run(try ReportQuery(kind: .summary, from: Events.day0, to: Events.day0, timeZone: "Asia/Kolkata"))
            #expect(local.rows.count == 1)
        }
    }
}

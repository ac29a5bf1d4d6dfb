import Foundation
import Testing
@testable import Tracker

/// The totals row (`totals=true`, `--totals`, every table) and the ratios that have no
/// denominator: counts summed, ratios of the sums, percentiles empty; JSON unchanged.
struct ReportTotalsTests {
    static let columns = ["day", "adUnit", "impressions", "attributedClicks", "ctr", "loadLatencyP50Ms"]
    static let totals: [ReportTotal] = [.label, .label, .sum, .sum, .ratio(of: "attributedClicks", over: "impressions"), .empty]

    /// Two ad units over a day: 100 impressions with 1 click, and 0 impressions with 3 clicks
    /// (attributed to impressions of the day before), whose CTR has no denominator.
    static func result(rows: [[ReportValue]]? = nil) throws -> ReportResult {
        let day = Day(year: 2026, month: 11, day: 1)!
        let rows = rows ?? [
            [.text("2026-11-01"), .text("/1/a"), .count(100), .count(1), .ratio(of: 1, over: 100), .count(120)],
            [.text("2026-11-01"), .text("/1/b"), .count(0), .count(3), .ratio(of: 3, over: 0), .missing],
        ]
        return ReportResult(query: try ReportQuery(kind: .summary, from: day, to: day), columns: columns, rows: rows,
                            totals: totals, lag: ProjectionLag(events: 0, seconds: 0), ivtRules: 0)
    }

    @Test func theTotalSumsCountsAndTakesTheRatioOfTheSumsNotTheMeanOfTheRatios() throws {
        let total = try Self.result().totalsRow
        #expect(total == [.text("Total"), .text(""), .count(100), .count(4), .ratio(0.04), .missing])
    }

    @Test func aTotalWithoutADenominatorHasNoRatio() throws {
        let result = try Self.result(rows: [[.text("2026-11-01"), .text("/1/b"), .count(0), .count(3), .noDenominator, .missing]])
        #expect(result.totalsRow[4] == .noDenominator)
        #expect(result.csv(totals: true).hasSuffix("\nTotal,,0,3,,\n"))
    }

    @Test func csvIsOneLinePerRowUnlessTotalsAreAskedThenEndsWithTheTotal() throws {
        let result = try Self.result()
        let rows = """
            day,adUnit,impressions,attributedClicks,ctr,loadLatencyP50Ms
            2026-11-01,/1/a,100,1,0.01,120
            2026-11-01,/1/b,0,3,,

            """
        #expect(result.csv == rows, "a ratio without a denominator is an empty field")
        #expect(result.csv(totals: false) == rows)
        #expect(result.csv(totals: true) == rows + "Total,,100,4,0.04,\n")
        // The bound holds the total too: the writer stops the process on a byte past it.
        #expect(result.csvBytes(totals: true).count <= result.csvByteBound)
    }

    @Test func anEmptyReportsTotalIsZerosWithoutRatios() throws {
        let result = try Self.result(rows: [])
        #expect(result.csv(totals: true) == "day,adUnit,impressions,attributedClicks,ctr,loadLatencyP50Ms\nTotal,,0,0,,\n")
        #expect(result.table.hasSuffix("(no rows)\n"))
    }

    @Test func jsonKeepsTheProtocolsZeroForARatioWithoutADenominatorAndHasNoTotal() throws {
        let result = try Self.result()
        #expect(result.json == """
            {"from":"2026-11-01","to":"2026-11-01","ivtRules":0,"rows":[\
            {"day":"2026-11-01","adUnit":"/1/a","impressions":100,"attributedClicks":1,"ctr":0.01,"loadLatencyP50Ms":120},\
            {"day":"2026-11-01","adUnit":"/1/b","impressions":0,"attributedClicks":3,"ctr":0.0,"loadLatencyP50Ms":null}]}
            """)
    }

    @Test func theTableEndsWithTheTotalAndShowsADashWhereThereIsNoRatio() throws {
        let table = try Self.result().table
        #expect(table == """
            day         adUnit  impressions  attributedClicks    ctr  loadLatencyP50Ms
            2026-11-01  /1/a            100                 1  1.0 %               120
            2026-11-01  /1/b              0                 3      –                 –
            Total                       100                 4  4.0 %                 –

            """, "\(table)")
    }

    @Test func aSumPastInt64StopsAtItsLimitRatherThanTrapping() throws {
        let big: [[ReportValue]] = (0..<2).map { _ in [.text("2026-11-01"), .text("/1/a"), .count(.max), .count(1), .noDenominator, .missing] }
        #expect(try Self.result(rows: big).totalsRow[2] == .count(.max))
    }
}

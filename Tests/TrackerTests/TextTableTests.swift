import Testing
@testable import Tracker

/// The one terminal-table renderer: `tracker report --output table` and the commands' listings.
struct TextTableTests {
    @Test func columnsAreTwoSpacesApartNumbersRightAligned() {
        let text = TextTable.render([["name", "events"], ["app", "7"], ["a-longer-name", "1234"]], rightAligned: [1])
        #expect(text == """
            name           events
            app                 7
            a-longer-name    1234

            """)
    }

    @Test func aReportTableRightAlignsItsCountsEndsWithItsTotalAndSaysWhenItIsEmpty() throws {
        let query = try ReportQuery(kind: .summary, from: Day(year: 2026, month: 11, day: 1)!, to: Day(year: 2026, month: 11, day: 2)!)
        let lag = ProjectionLag(events: 0, seconds: 0)
        let result = ReportResult(query: query, columns: ["adUnit", "impressions", "ctr"],
                                  rows: [[.text("/1/a"), .count(12), .ratio(0.5)], [.text("/1/bb"), .count(3), .ratio(0.25)]],
                                  totals: [.label, .sum, .empty], lag: lag, ivtRules: 0)
        #expect(result.table == """
            adUnit  impressions     ctr
            /1/a             12  50.0 %
            /1/bb             3  25.0 %
            Total            15       –

            """)
        let empty = ReportResult(query: query, columns: ["adUnit", "impressions"], rows: [], totals: [.label, .sum], lag: lag, ivtRules: 0)
        #expect(empty.table == "adUnit  impressions\n(no rows)\n")
    }
}

import Testing
import Tracker
@testable import TrackerServer

/// A CSV answer's `Content-Disposition` and the `totals` parameter, without a database.
struct ReportFileNameTests {
    static let first = Day(year: 2026, month: 11, day: 1)!, last = Day(year: 2026, month: 11, day: 7)!

    @Test func aCSVIsNamedByItsReportRangeAndZoneAsTheDashboardNamesIt() {
        #expect(ReportRoutes.attachment(report: "summary", from: Self.first, to: Self.last, zone: "America/New_York")
            == #"attachment; filename="tracker-summary-2026-11-01-2026-11-07-America_New_York.csv""#)
        #expect(ReportRoutes.attachment(report: "funnel", from: Self.first, to: Self.first, zone: "UTC", hourly: true)
            == #"attachment; filename="tracker-funnel-2026-11-01-2026-11-01-UTC-hourly.csv""#)
        // `+` and `-` stay (Etc/GMT+5 is not Etc/GMT-5); every other run of characters is one `_`.
        #expect(ReportRoutes.attachment(report: "assets", from: Self.first, to: Self.last, zone: "Etc/GMT+5")
            == #"attachment; filename="tracker-assets-2026-11-01-2026-11-07-Etc_GMT+5.csv""#)
        #expect(ReportRoutes.attachment(report: "ivt", from: Self.first, to: Self.last, zone: "America/Argentina/Buenos_Aires")
            == #"attachment; filename="tracker-ivt-2026-11-01-2026-11-07-America_Argentina_Buenos_Aires.csv""#)
    }

    @Test func aNameHoldsOnlyCharactersThatNeedNoQuotingWhateverTheZoneSays() {
        let header = ReportRoutes.attachment(report: "summary", from: Self.first, to: Self.last, zone: "a\"b\\c/é\r\n;d")
        #expect(header == #"attachment; filename="tracker-summary-2026-11-01-2026-11-07-a_b_c_d.csv""#)
    }

    @Test func totalsIsABooleanForCSVOfTheProjectionsReportsOnly() throws {
        #expect(try ReportRoutes.totals(nil, csv: true, report: "summary") == false)
        #expect(try ReportRoutes.totals("", csv: false, report: "summary") == false)
        #expect(try ReportRoutes.totals("TRUE", csv: true, report: "waterfall") == true)
        #expect(try ReportRoutes.totals("1", csv: true, report: "summary") == true)
        #expect(try ReportRoutes.totals("false", csv: false, report: "reconciliation") == false)
        for (value, csv, report, says) in [("yes", true, "summary", "totals must be true or false, got 'yes'"),
                                           ("true", false, "summary", "totals=true adds a Total line to CSV only"),
                                           ("true", true, "reconciliation", "totals is not available for the reconciliation report")] {
            #expect { try ReportRoutes.totals(value, csv: csv, report: report) } throws: { error in
                guard let error = error as? APIError else { return false }
                return error.code == .invalidParameter && error.message.hasPrefix(says)
            }
        }
    }
}

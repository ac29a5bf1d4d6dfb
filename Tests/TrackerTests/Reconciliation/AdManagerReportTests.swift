import Testing
import TrackerInput

/// Reading Ad Manager exports: RFC 4180 exactly, both header styles, and an error naming the
/// row and column for anything else.
@Suite struct AdManagerReportTests {
    func records(_ text: String) -> [Result<[String], CSVError>] {
        CSVRecords(Array(text.utf8)).map { $0.map(\.fields) }
    }

    @Test func quotedFieldsEmbeddedCommasAndLineBreaksCRLFAndTheByteOrderMark() {
        let text = "\u{FEFF}a,\"b, with comma\",\"say \"\"hi\"\"\"\r\n1,\"two\nlines\",3\r\n\r\nx,,\"\"\n"
        #expect(records(text).map { try? $0.get() } == [["a", "b, with comma", "say \"hi\""], ["1", "two\nlines", "3"], ["x", "", ""]])
        #expect(CSVRecords(Array("a\nb".utf8)).map { (try? $0.get())?.number } == [1, 2])
        #expect(CSVRecords(Array("a\n\nb".utf8)).map { (try? $0.get())?.number } == [1, 3], "an empty line is no record, but has its number")
    }

    @Test(arguments: [
        ("a,b\n1,\"2\n", "row 2: a quoted field is never closed"),
        ("a,b\n1,\"2\"x\n", "row 2, field 2: text after a closing quote"),
        ("a,b\n1,2\"x\"\n", "row 2, field 2: a \" inside a field that is not quoted"),
        ("a,b\n1,2\r3\n", "row 2: a carriage return that does not end a line"),
    ])
    func malformedCSVNamesTheRow(_ text: String, _ message: String) {
        let failure = records(text).compactMap { if case .failure(let e) = $0 { e } else { nil } }.first
        #expect(failure?.description.hasPrefix(message) == true, "\(String(describing: failure))")
    }

    @Test func invalidUTF8IsRefused() {
        let failure = CSVRecords([0x61, 0x0A, 0xFF, 0x0A]).compactMap { if case .failure(let e) = $0 { e } else { nil } }.first
        #expect(failure == .notUTF8(record: 2, field: 1))
    }

    @Test func theAPIsHeadersWithThousandsSeparatorsAndNameColumnsInAnyOrder() throws {
        let text = """
            Dimension.AD_UNIT_NAME,Dimension.AD_UNIT_ID,Dimension.DATE,Column.AD_SERVER_IMPRESSIONS,Column.AD_SERVER_CLICKS
            sports_top,1234,2026-11-01,"1,234,567",12
            /6499/home,99,2026-11-02,0,0

            """
        let report = try AdManagerReport.parse(Array(text.utf8))
        #expect(report.rows == [
            AdManagerRow(row: 2, day: Day(year: 2026, month: 11, day: 1)!, adUnit: "sports_top", impressions: 1_234_567, clicks: 12),
            AdManagerRow(row: 3, day: Day(year: 2026, month: 11, day: 2)!, adUnit: "/6499/home", impressions: 0, clicks: 0),
        ])
    }

    @Test func theUIsHeadersInAnyCaseAndTheTotalRowIsSkipped() throws {
        let text = "date,AD UNIT, Ad server impressions ,Ad server CTR,Ad server clicks\r\n2026-11-01,home,10,1.5%,2\r\nTotal,,10,1.5%,2\r\n"
        let report = try AdManagerReport.parse(Array(text.utf8))
        #expect(report.rows.map(\.adUnit) == ["home"])
        #expect(report.rows.first?.impressions == 10)
    }

    /// The UI writes "Total" in its first column, whichever dimension that is.
    @Test(arguments: [
        "Ad unit,Date,Ad server impressions,Ad server clicks\nhome,2026-11-01,10,2\nTotal,,10,2\n",
        "Advertiser,Date,Ad unit,Ad server impressions,Ad server clicks\nAcme,2026-11-01,home,10,2\nTOTAL,,,10,2\n",
    ])
    func theTotalRowIsSkippedWhicheverColumnComesFirst(text: String) throws {
        let report = try AdManagerReport.parse(Array(text.utf8))
        #expect(report.rows.map(\.adUnit) == ["home"])
        #expect(report.rows.map(\.impressions) == [10])
    }

    @Test func anAdUnitNamedTotalOnADayIsARow() throws {
        let report = try AdManagerReport.parse(Array("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,Total,3,0\n".utf8))
        #expect(report.rows.map(\.adUnit) == ["Total"])
    }

    @Test func theIdColumnServesWhenThereIsNoNameColumn() throws {
        let report = try AdManagerReport.parse(Array("Dimension.DATE,Dimension.AD_UNIT_ID,Column.AD_SERVER_IMPRESSIONS,Column.AD_SERVER_CLICKS\n2026-11-01,21775744923,5,0\n".utf8))
        #expect(report.rows.first?.adUnit == "21775744923")
    }

    @Test(arguments: [
        ("Date,Ad unit,Ad server impressions\n", "row 1: the header has no column Column.AD_SERVER_CLICKS (or Ad server clicks)"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n11/01/2026,home,1,0\n", "row 2, column Date: '11/01/2026' is not a date as YYYY-MM-DD"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-02-30,home,1,0\n", "row 2, column Date: '2026-02-30'"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,home,1.5,0\n", "row 2, column Ad server impressions: '1.5' is not a whole number"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,home,\"12,34\",0\n", "row 2, column Ad server impressions: '12,34'"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,home,-1,0\n", "row 2, column Ad server impressions: '-1'"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,home,1,99999999999999999999\n", "row 2, column Ad server clicks"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,,1,0\n", "row 2, column Ad unit: '' is not an ad unit name"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n2026-11-01,home,1\n", "row 2: 3 field(s), but the header has 4"),
        ("", "the file is empty"),
        // A row that lost its date, "Total" outside the first column or not: not the UI's last line.
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n,Total,10,2\n", "row 2, column Date: '' is not a date"),
        ("Date,Ad unit,Ad server impressions,Ad server clicks\n,home,10,2\n", "row 2, column Date: '' is not a date"),
    ])
    func aMalformedFileIsRefusedNamingTheRowAndColumn(_ text: String, _ message: String) {
        #expect(throws: ImportError.self) { try AdManagerReport.parse(Array(text.utf8)) }
        do { _ = try AdManagerReport.parse(Array(text.utf8)) } catch {
            #expect(error.description.hasPrefix(message), "\(error)")
        }
    }

    @Test func aUnitMapMapsNamesToPathsAndRefusesWhatIsNotAPath() throws {
        let map = try AdUnitMap.parse(Array("adManager,adUnit\nsports_top,/6499/sports/top\nhome,/6499/home\n".utf8))
        #expect(map.paths == ["sports_top": "/6499/sports/top", "home": "/6499/home"])
        #expect(throws: ImportError.self) { try AdUnitMap.parse(Array("home,home\n".utf8)) }
        #expect(throws: ImportError.self) { try AdUnitMap.parse(Array("home,/1/a\nhome,/1/b\n".utf8)) }
    }
}

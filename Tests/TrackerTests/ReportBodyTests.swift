import Foundation
import Testing
@testable import Tracker

/// Report bodies are written straight into memory sized beforehand: whatever the values, the
/// bound holds them (the writer stops the process on a byte past it) and the bytes read back
/// as the values.
struct ReportBodyTests {
    /// The worst strings for the bound (control characters are six bytes each in JSON) and for
    /// CSV quoting, the extreme counts, a ratio, in another zone by hour.
    static func hostileResult() throws -> ReportResult {
        var query = try ReportQuery(kind: .summary, from: Day(year: 2026, month: 11, day: 1)!, to: Day(year: 2026, month: 11, day: 2)!)
        query.timeZone = "America/New_York"
        query.granularity = .hour
        let texts = ["\u{1}\u{2}\u{1f}", "a,b", "say \"hi\"", "line\nend\r", "back\\slash", "é 😀", "", "q\"\u{301}", "crlf\r\n",
                     "=1+1", "-2,\"x\"", "@SUM(A1)", "\tplus"]
        let rows: [[ReportValue]] = texts.enumerated().map { i, text in
            [.text(text), .count(i.isMultiple(of: 2) ? .max : .min), .ratio(1 / 3), .ratio(i == 0 ? -2.2250738585072014e-308 : .infinity)]
        }
        return ReportResult(query: query, columns: ["adUnit", "impressions", "ctr", "share"], rows: rows,
                            totals: [.label, .sum, .ratio(of: "impressions", over: "impressions"), .empty],
                            lag: ProjectionLag(events: 0, seconds: 0), ivtRules: 7)
    }

    @Test func theJSONBodyReadsBackAsTheRows() throws {
        let result = try Self.hostileResult()
        let bytes = result.jsonBytes
        let body = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(body["tz"] as? String == "America/New_York")
        #expect(body["granularity"] as? String == "hour")
        #expect(body["ivtRules"] as? Int == 7)
        let rows = try #require(body["rows"] as? [[String: Any]])
        #expect(rows.count == result.rows.count)
        for (place, (row, values)) in zip(rows, result.rows).enumerated() {
            guard case .text(let text) = values[0], case .count(let count) = values[1] else { Issue.record("unexpected values"); continue }
            #expect(row["adUnit"] as? String == text)
            #expect((row["impressions"] as? NSNumber)?.int64Value == count)
            #expect((row["ctr"] as? NSNumber)?.doubleValue == 1.0 / 3)
            #expect((row["share"] as? NSNumber)?.doubleValue == (place == 0 ? -2.2250738585072014e-308 : 0))
        }
    }

    @Test func theCSVBodyQuotesWhatRFC4180Quotes() throws {
        let result = try Self.hostileResult()
        // Written the plain way, field by field, as a reader of RFC 4180 expects.
        var expected = result.columns.joined(separator: ",") + "\n"
        for row in result.rows {
            expected += row.map(csvReference).joined(separator: ",") + "\n"
        }
        #expect(result.csv == expected)
        // The totals line fits the same bound, whatever the counts add up to.
        #expect(result.csv(totals: true).hasPrefix(expected))
        #expect(result.csvBytes(totals: true).count <= result.csvByteBound)
        // The reconciliation report's CSV quotes its text the same way.
        for row in result.rows {
            for value in row where value.isText { #expect(ReportResult.csvField(value.plain) == csvReference(value)) }
        }
    }

    /// RFC 4180's rule, on the field's bytes (a quote followed by a combining accent is still a
    /// quote to a CSV reader, though Swift sees one character), after the formula guard: text
    /// a spreadsheet would run (starting with =, +, -, @, a tab or a carriage return) gets a
    /// leading `'`; numbers are left as they are.
    func csvReference(_ value: ReportValue) -> String {
        var s = value.plain
        if value.isText, let first = s.unicodeScalars.first, "=+-@\t\r".unicodeScalars.contains(first) { s = "'" + s }
        guard s.utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) else { return s }
        let parts = s.utf8.split(separator: 0x22, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        return "\"" + parts.joined(separator: "\"\"") + "\""
    }

    @Test func anEmptyReportIsItsHeaderAlone() throws {
        var result = try Self.hostileResult()
        result.rows = []
        #expect(result.json == #"{"from":"2026-11-01","to":"2026-11-02","tz":"America/New_York","granularity":"hour","ivtRules":7,"rows":[]}"#)
        #expect(result.csv == "adUnit,impressions,ctr,share\n")
    }
}

private extension ReportValue {
    var isText: Bool {
        if case .text = self { return true }
        return false
    }
}

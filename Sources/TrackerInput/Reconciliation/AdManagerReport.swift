/// One row of an Ad Manager report export: a local day, an ad unit as Ad Manager names it,
/// and Ad Manager's counts.
public struct AdManagerRow: Sendable, Hashable {
    /// The row's number in the file; the header is row 1.
    public var row: Int
    /// A local day in the import's time zone.
    public var day: Day
    /// The ad unit as the file gives it: a name, a code, or a path.
    public var adUnit: String
    public var impressions: Int64
    public var clicks: Int64
    /// Ad Manager's total ad requests, when the file has that column.
    public var requests: Int64?

    public init(row: Int, day: Day, adUnit: String, impressions: Int64, clicks: Int64, requests: Int64? = nil) {
        self.row = row
        self.day = day
        self.adUnit = adUnit
        self.impressions = impressions
        self.clicks = clicks
        self.requests = requests
    }
}

/// An Ad Manager report export (CSV), read as the reconciliation imports it.
///
/// Columns are found by header name, case-insensitively, in the API's spelling or the UI's:
/// `Dimension.DATE`/`Date`, `Dimension.AD_UNIT_NAME`/`Ad unit` (or `Dimension.AD_UNIT_ID` when
/// there is no name column), `Column.AD_SERVER_IMPRESSIONS`/`Ad server impressions`,
/// `Column.AD_SERVER_CLICKS`/`Ad server clicks`, and when present
/// `Column.TOTAL_AD_REQUESTS`/`Total ad requests`. Other columns are ignored; the UI's last line,
/// `Total` in its first column (the date's, or another's with the date empty), is skipped. Numbers may carry thousands separators
/// (`1,234`). Any other departure is an error naming the row and the column: nothing of a
/// file that cannot be read exactly is imported.
public struct AdManagerReport: Sendable, Equatable {
    public var rows: [AdManagerRow]
    /// Whether the file has a requests column (every row then has `requests`).
    public var hasRequests: Bool { rows.first?.requests != nil }

    /// The columns the import reads, with the header names that give them; `requests` is optional.
    public enum Column: String, Sendable, CaseIterable {
        case date, adUnit, impressions, clicks, requests

        var isOptional: Bool { self == .requests }

        /// Header names, lower-cased, in order of preference.
        var headers: [String] {
            switch self {
            case .date: ["dimension.date", "date"]
            case .adUnit: ["dimension.ad_unit_name", "ad unit", "dimension.ad_unit_id"]
            case .impressions: ["column.ad_server_impressions", "ad server impressions"]
            case .clicks: ["column.ad_server_clicks", "ad server clicks"]
            case .requests: ["column.total_ad_requests", "total ad requests"]
            }
        }

        /// How an error message names the column.
        var shown: String {
            switch self {
            case .date: "Dimension.DATE (or Date)"
            case .adUnit: "Dimension.AD_UNIT_NAME (or Ad unit, or Dimension.AD_UNIT_ID)"
            case .impressions: "Column.AD_SERVER_IMPRESSIONS (or Ad server impressions)"
            case .clicks: "Column.AD_SERVER_CLICKS (or Ad server clicks)"
            case .requests: "Column.TOTAL_AD_REQUESTS (or Total ad requests)"
            }
        }
    }

    /// Reads an export.
    ///
    /// - Parameter bytes: the file, UTF-8 (a byte-order mark is allowed).
    /// - Throws: `ImportError`, naming the row (the header is row 1) and the column.
    public static func parse(_ bytes: [UInt8]) throws(ImportError) -> AdManagerReport {
        var records = CSVRecords(bytes).makeIterator()
        guard let first = records.next() else { throw .empty }
        let header: [String]
        switch first {
        case .success(let record): header = record.fields
        case .failure(let error): throw .csv(error)
        }
        let names = header.map { $0.trimmedBlanks.lowercased() }
        var index: [Column: Int] = [:]
        var headerName: [Column: String] = [:]
        for column in Column.allCases {
            guard let (i, _) = column.headers.lazy.compactMap({ h in names.firstIndex(of: h).map { ($0, h) } }).first else {
                if column.isOptional { continue }
                throw .missingColumn(column.shown)
            }
            index[column] = i
            headerName[column] = header[i].trimmedBlanks
        }
        var rows: [AdManagerRow] = []
        while let next = records.next() {
            let record: (number: Int, fields: [String])
            switch next {
            case .success(let r): record = r
            case .failure(let error): throw .csv(error)
            }
            guard record.fields.count == header.count else {
                throw .fieldCount(row: record.number, got: record.fields.count, expected: header.count)
            }
            func cell(_ column: Column) -> String { record.fields[index[column]!].trimmedBlanks }
            let dayText = cell(.date)
            // The UI's last line writes "Total" in its first column, the date's or another
            // dimension's, and leaves the other dimensions empty.
            if dayText.lowercased() == "total" || dayText.isEmpty && record.fields.first?.trimmedBlanks.lowercased() == "total" { continue }
            guard let day = Day(iso: dayText) else {
                throw .malformed(row: record.number, column: headerName[.date]!, value: dayText, rule: "a date as YYYY-MM-DD")
            }
            let unit = cell(.adUnit)
            guard !unit.isEmpty else {
                throw .malformed(row: record.number, column: headerName[.adUnit]!, value: unit, rule: "an ad unit name, code or path")
            }
            func count(_ column: Column) throws(ImportError) -> Int64 {
                let text = cell(column)
                guard let n = Self.count(text) else {
                    throw .malformed(row: record.number, column: headerName[column]!, value: text,
                                     rule: "a whole number of 0 or more, with or without thousands separators (1,234)")
                }
                return n
            }
            rows.append(AdManagerRow(row: record.number, day: day, adUnit: unit, impressions: try count(.impressions),
                                     clicks: try count(.clicks), requests: index[.requests] == nil ? nil : try count(.requests)))
        }
        return AdManagerReport(rows: rows)
    }

    /// `1234` or `1,234,567`; `nil` for anything else (signs, decimals, misplaced separators, overflow).
    static func count(_ text: String) -> Int64? {
        let groups = text.split(separator: ",", omittingEmptySubsequences: false)
        guard let head = groups.first, !head.isEmpty, groups.dropFirst().allSatisfy({ $0.count == 3 }),
              groups.count == 1 || head.count <= 3
        else { return nil }
        var value: Int64 = 0
        for group in groups {
            for b in group.utf8 {
                guard b >= 0x30, b <= 0x39 else { return nil }
                let (times, o1) = value.multipliedReportingOverflow(by: 10)
                let (plus, o2) = times.addingReportingOverflow(Int64(b - 0x30))
                guard !o1, !o2 else { return nil }
                value = plus
            }
        }
        return value
    }
}

/// How Ad Manager's ad unit names become the tracker's ad unit paths (`--unit-map`): CSV rows
/// `adManager,adUnit`, an optional header row of exactly those names.
public struct AdUnitMap: Sendable, Equatable {
    public var paths: [String: String]

    public init(paths: [String: String] = [:]) {
        self.paths = paths
    }

    /// Reads a unit map; an ad unit that is not a path, or a name mapped twice to different
    /// paths, is an error naming the row.
    public static func parse(_ bytes: [UInt8]) throws(ImportError) -> AdUnitMap {
        var paths: [String: String] = [:]
        for next in CSVRecords(bytes) {
            let record: (number: Int, fields: [String])
            switch next {
            case .success(let r): record = r
            case .failure(let error): throw .unitMap(error.description)
            }
            guard record.fields.count == 2 else {
                throw .unitMap("row \(record.number): \(record.fields.count) field(s); each row is adManager,adUnit")
            }
            let name = record.fields[0].trimmedBlanks, path = record.fields[1].trimmedBlanks
            if record.number == 1, name.lowercased() == "admanager", path.lowercased() == "adunit" { continue }
            guard case .ok = EventRules.checkAdUnit(path) else {
                throw .unitMap("row \(record.number): '\(path)' is not an ad unit path ('/' + network code + '/segment'…, e.g. /6499/example/native)")
            }
            if let earlier = paths[name], earlier != path {
                throw .unitMap("row \(record.number): '\(name)' is mapped to both \(earlier) and \(path)")
            }
            paths[name] = path
        }
        return AdUnitMap(paths: paths)
    }
}

/// Why an import cannot be read; nothing of the file is stored.
public enum ImportError: Error, Sendable, Equatable, CustomStringConvertible {
    case empty
    case csv(CSVError)
    case missingColumn(String)
    case fieldCount(row: Int, got: Int, expected: Int)
    case malformed(row: Int, column: String, value: String, rule: String)
    case unitMap(String)

    public var description: String {
        switch self {
        case .empty: "the file is empty: export the report as CSV with a header row"
        case .csv(let error): "not RFC 4180 CSV: \(error)"
        case .missingColumn(let column): "row 1: the header has no column \(column)"
        case .fieldCount(let row, let got, let expected): "row \(row): \(got) field(s), but the header has \(expected)"
        case .malformed(let row, let column, let value, let rule):
            "row \(row), column \(column): '\(value.count > 40 ? String(value.prefix(40)) + "…" : value)' is not \(rule)"
        case .unitMap(let message): "unit map: \(message)"
        }
    }
}

extension String {
    /// Without the spaces and tabs around it (a spreadsheet's padding of a cell).
    var trimmedBlanks: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " && $0 != "\t" && $0 != "\u{A0}" }) else { return "" }
        let last = scalars.lastIndex(where: { $0 != " " && $0 != "\t" && $0 != "\u{A0}" })!
        return String(scalars[first...last])
    }
}

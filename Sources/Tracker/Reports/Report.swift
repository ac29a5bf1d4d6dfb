/// One cell of a report.
public enum ReportValue: Sendable, Hashable {
    case text(String)
    case count(Int64)
    case ratio(Double)
}

/// A report's rows, with the columns in SPEC order (dimensions first).
public struct ReportResult: Sendable {
    public var query: ReportQuery
    public var columns: [String]
    public var rows: [[ReportValue]]
    public var lag: ProjectionLag

    package init(query: ReportQuery, columns: [String], rows: [[ReportValue]], lag: ProjectionLag) {
        self.query = query
        self.columns = columns
        self.rows = rows
        self.lag = lag
    }
}

/// One cell of a report.
public enum ReportValue: Sendable, Hashable {
    case text(String)
    case count(Int64)
    case ratio(Double)
    /// No value: a percentile of no values (JSON `null`, an empty CSV cell, "–" in a table).
    case missing
}

/// A report's rows, with the columns in the rules' order (dimensions first).
public struct ReportResult: Sendable {
    public var query: ReportQuery
    public var columns: [String]
    public var rows: [[ReportValue]]
    public var lag: ProjectionLag
    /// The version of the invalid-traffic rule set the numbers were computed with.
    public var ivtRules: Int

    package init(query: ReportQuery, columns: [String], rows: [[ReportValue]], lag: ProjectionLag, ivtRules: Int) {
        self.query = query
        self.columns = columns
        self.rows = rows
        self.lag = lag
        self.ivtRules = ivtRules
    }
}

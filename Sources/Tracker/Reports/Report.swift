/// One cell of a report.
public enum ReportValue: Sendable, Hashable {
    case text(String)
    case count(Int64)
    case ratio(Double)
    /// A ratio whose denominator is 0 (a CTR without impressions): `0.0` in JSON, where the
    /// protocol keeps every ratio a number, and, as the dashboard shows it, an empty CSV cell
    /// and "–" in a table.
    case noDenominator
    /// No value: a percentile of no values (JSON `null`, an empty CSV cell, "–" in a table).
    case missing

    /// `numerator / denominator`, or `noDenominator` when the denominator is 0: every ratio of a
    /// report (CTR, share, fill and show rates), in its rows and in its totals.
    public static func ratio(of numerator: Int64, over denominator: Int64) -> ReportValue {
        denominator == 0 ? .noDenominator : .ratio(Double(numerator) / Double(denominator))
    }
}

/// How one column of a report adds up in its totals row (`ReportResult.totalsRow`).
public enum ReportTotal: Sendable, Hashable {
    /// A dimension (day, hour, ad unit…): the first column says "Total", the others are empty.
    case label
    /// A count: the sum of the rows'.
    case sum
    /// A ratio of two of the report's count columns, named: recomputed from their totals, never
    /// summed or averaged from the rows' ratios.
    case ratio(of: String, over: String)
    /// A value no sum of the rows makes (a latency percentile): empty.
    case empty
}

/// A report's rows, with the columns in the rules' order (dimensions first).
public struct ReportResult: Sendable {
    public var query: ReportQuery
    public var columns: [String]
    public var rows: [[ReportValue]]
    /// How each column adds up in the totals row, one per column.
    public var totals: [ReportTotal]
    public var lag: ProjectionLag
    /// The version of the invalid-traffic rule set the numbers were computed with.
    public var ivtRules: Int

    package init(query: ReportQuery, columns: [String], rows: [[ReportValue]], totals: [ReportTotal], lag: ProjectionLag, ivtRules: Int) {
        precondition(totals.count == columns.count, "a total rule per column")
        self.query = query
        self.columns = columns
        self.rows = rows
        self.totals = totals
        self.lag = lag
        self.ivtRules = ivtRules
    }
}

/// The four reports of SPEC section 6.
public enum ReportKind: String, Sendable, CaseIterable {
    case summary, assets, sources, adchoices
}

/// One report request: which report, which days, which rows.
public struct ReportQuery: Sendable, Hashable {
    public var kind: ReportKind
    public var from: Day
    public var to: Day
    public var adUnit: String?
    public var formatId: String?
    public var includeTest: Bool

    /// The longest range one request may ask for, in days.
    public static let maxDays = 366

    /// Checks the range rules; the error names the parameter and the rule.
    public init(kind: ReportKind, from: Day, to: Day, adUnit: String? = nil, formatId: String? = nil, includeTest: Bool = false) throws(ReportQueryError) {
        guard from <= to else { throw .fromAfterTo(from: from, to: to) }
        let days = Int(to.daysSinceEpoch - from.daysSinceEpoch) + 1
        guard days <= Self.maxDays else { throw .rangeTooLong(days: days) }
        self.kind = kind
        self.from = from
        self.to = to
        self.adUnit = adUnit
        self.formatId = formatId
        self.includeTest = includeTest
    }
}

public enum ReportQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    case fromAfterTo(from: Day, to: Day)
    case rangeTooLong(days: Int)

    public var description: String {
        switch self {
        case .fromAfterTo(let from, let to): "from (\(from)) is after to (\(to)); from and to are inclusive UTC days with from <= to"
        case .rangeTooLong(let days): "the range from..to spans \(days) days; at most \(ReportQuery.maxDays) days per report"
        }
    }
}

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
}

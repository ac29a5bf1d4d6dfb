/// One reconciliation report request: which import, which days, what tolerance.
public struct ReconciliationQuery: Sendable, Hashable {
    /// The import's id; `nil`: the newest import.
    public var importId: String?
    /// Local days in the import's zone; `nil`: the import's first (or last) day.
    public var from: Day?
    public var to: Day?
    /// The largest discrepancy, as a fraction of Ad Manager's count, still within tolerance.
    public var threshold: Double
    public var includeTest: Bool

    /// The IAB's convention: 10 % between a third-party count and the publisher's ad server.
    public static let defaultThreshold = 0.10

    public init(importId: String? = nil, from: Day? = nil, to: Day? = nil, threshold: Double = Self.defaultThreshold,
                includeTest: Bool = false) {
        self.importId = importId
        self.from = from
        self.to = to
        self.threshold = threshold
        self.includeTest = includeTest
    }

    /// The query from parameters by name (`import`, `from`, `to`, `threshold`, `includeTest`).
    public static func parse(parameter: (String) -> String?) throws(ReportQueryError) -> ReconciliationQuery {
        func day(_ name: String) throws(ReportQueryError) -> Day? {
            guard let text = parameter(name), !text.isEmpty else { return nil }
            guard let day = Day(iso: text) else {
                throw .invalidParameter("\(name) must be a local day of the import's time zone as YYYY-MM-DD, got '\(text)'")
            }
            return day
        }
        var threshold = defaultThreshold
        if let text = parameter("threshold"), !text.isEmpty {
            guard let value = Double(text), value.isFinite, value >= 0, value <= 100 else {
                throw .invalidParameter("threshold must be a number from 0 to 100 (a fraction of Ad Manager's count: 0.10 is 10 %), got '\(text)'")
            }
            threshold = value
        }
        let importId = parameter("import").flatMap { $0.isEmpty ? nil : $0 }
        if let importId, importId.count > 64 || !importId.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }) {
            throw .invalidParameter("import must be an import id as tracker reconcile list shows it (hex digits), got '\(importId.prefix(80))'")
        }
        let query = ReconciliationQuery(importId: importId, from: try day("from"), to: try day("to"), threshold: threshold,
                                        includeTest: try ReportQuery.includeTest(parameter("includeTest")))
        if let from = query.from, let to = query.to, from > to { throw .fromAfterTo(from: from, to: to) }
        return query
    }
}

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
    /// The zone the caller names (`tz`), which must be the import's own: the report's days are
    /// Ad Manager's, in the zone the file was exported in. `nil`: not named.
    public var timeZone: String?
    /// An ad unit, or with a trailing `/` every ad unit under that path: the rows of both sides kept.
    public var adUnit: String?

    /// The IAB's convention: 10 % between a third-party count and the publisher's ad server.
    public static let defaultThreshold = 0.10

    public init(importId: String? = nil, from: Day? = nil, to: Day? = nil, threshold: Double = Self.defaultThreshold,
                includeTest: Bool = false, timeZone: String? = nil, adUnit: String? = nil) {
        self.importId = importId
        self.from = from
        self.to = to
        self.threshold = threshold
        self.includeTest = includeTest
        self.timeZone = timeZone
        self.adUnit = adUnit
    }

    /// The query from parameters by name (`import`, `from`, `to`, `threshold`, `includeTest`,
    /// `adUnit` as every report takes it, and `tz`, which must be a zone name, and `granularity`,
    /// which must be `day`: Ad Manager's rows are local days). `formatId` and `adUnitLevel` are
    /// refused: Ad Manager's rows are summed over formats, and ad units are compared as the
    /// file names them.
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
        let zone = parameter("tz").flatMap { $0.isEmpty ? nil : $0 }
        if let zone, !ReportQuery.isZoneName(zone) { throw .unknownTimeZone(zone) }
        if try ReportQuery.granularity(parameter("granularity")) != .day {
            throw .invalidParameter("granularity must be day for the reconciliation report: Ad Manager's rows are local days, got '\(parameter("granularity") ?? "")'")
        }
        for (name, why) in [("formatId", "its rows are summed over formats, as Ad Manager's are"),
                            ("adUnitLevel", "its rows compare each ad unit as the file names it")] {
            if let value = parameter(name), !value.isEmpty {
                throw .invalidParameter("\(name) is not a parameter of the reconciliation report: \(why)")
            }
        }
        let query = ReconciliationQuery(importId: importId, from: try day("from"), to: try day("to"), threshold: threshold,
                                        includeTest: try ReportQuery.includeTest(parameter("includeTest")), timeZone: zone,
                                        adUnit: try ReportQuery.adUnitFilter(parameter("adUnit")))
        if let from = query.from, let to = query.to, from > to { throw .fromAfterTo(from: from, to: to) }
        return query
    }
}

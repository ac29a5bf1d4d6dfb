/// The projection tables the reports read.
public enum ProjectionTable: Int8, Sendable, Hashable, CaseIterable {
    /// Per day, ad unit and format: the `summary` and `adchoices` reports.
    case format
    /// Per day, ad unit, format and asset key: the `assets` report.
    case asset
    /// Per day, ad unit, format and adapter: the `sources` report (format only for filtering).
    case source
    /// Per day, ad unit, format and invalid-traffic label: the `ivt` report.
    case ivt
}

/// Which events a row was computed from, so that reports can leave test traffic out exactly.
///
/// An ad without test events contributes once (`plain`), valid for both kinds of report.
/// An ad with any test event contributes twice: over all its events (`withTest`) and over
/// its non-test events only (`withoutTest`). A report excluding test traffic sums `plain`
/// and `withoutTest`; one including it sums `plain` and `withTest`.
public enum TrafficClass: Int16, Sendable, Hashable, CaseIterable {
    case plain = 0
    case withTest = 1
    case withoutTest = 2

    public static func classes(includeTest: Bool) -> [TrafficClass] {
        includeTest ? [.plain, .withTest] : [.plain, .withoutTest]
    }
}

/// One row of a projection table: its dimensions.
///
/// Rows are kept per UTC quarter hour; the day tables receive the same rows summed by day
/// (`ProjectionWriter`), so a row's day is always its quarter hour's.
public struct ProjectionKey: Sendable, Hashable {
    public var table: ProjectionTable
    public var trafficClass: TrafficClass
    /// The UTC quarter hour the row counts in (`QuarterHour`).
    public var quarterHour: QuarterHour
    public var adUnit: String
    public var formatId: String
    /// The asset key for the asset table; "" otherwise.
    public var assetKey: String = ""
    /// The adapter ("" when absent) for the source table; "" otherwise.
    public var adapter: String = ""
    /// The invalid-traffic label for the ivt table; "" otherwise.
    public var label: String = ""
}

/// A row's measures; unused lanes stay zero. SIMD makes adding and subtracting rows cheap.
public typealias Measures = SIMD16<Int64>

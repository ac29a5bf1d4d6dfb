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
    /// Per day, ad unit and format: loads and loaded ads, the `funnel` report.
    case funnel
    /// Per day, ad unit, format and error code: failed loads, the `failures` report.
    case failure
    /// Per day, ad unit, format, adapter and position: mediation attempts, the `waterfall` report.
    case waterfall
}

/// A key column of a projection table, after its traffic class and time. Reports name their
/// dimensions as the cases are named.
public enum ProjectionDimension: String, Sendable, Hashable, CaseIterable {
    case adUnit, formatId, assetKey, adapter, label, errorCode, position

    /// The column's name.
    public var column: String {
        switch self {
        case .adUnit: "ad_unit"
        case .formatId: "format_id"
        case .assetKey: "asset_key"
        case .adapter: "adapter"
        case .label: "label"
        case .errorCode: "error_code"
        case .position: "position"
        }
    }

    /// Whether the column is text (every one but the waterfall's `position`, an integer).
    public var isText: Bool { self != .position }
}

extension ProjectionTable {
    /// The table's key columns after its traffic class and time, in primary-key order.
    public var dimensions: [ProjectionDimension] {
        switch self {
        case .format, .funnel: [.adUnit, .formatId]
        case .asset: [.adUnit, .formatId, .assetKey]
        case .source: [.adUnit, .formatId, .adapter]
        case .ivt: [.adUnit, .formatId, .label]
        case .failure: [.adUnit, .formatId, .errorCode]
        case .waterfall: [.adUnit, .formatId, .adapter, .position]
        }
    }

    /// The key columns' names after the traffic class and time.
    public var dimensionColumns: [String] { dimensions.map(\.column) }

    /// Whether the table's half-day rows keep their totals (the last running count) in a column
    /// of their own, `totals` (sql/018_inline_totals.sql): the tables whose full rows are past
    /// the 8160 bytes PostgreSQL keeps inline, so that a report by local day finds a total
    /// without an index lookup in TOAST.
    public var keepsTotalsInline: Bool { self == .funnel || self == .waterfall }
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
    /// The error code for the failure table; "" otherwise.
    public var errorCode: String = ""
    /// The waterfall position for the waterfall table; 0 otherwise.
    public var position: Int32 = 0

    /// The text value of dimension `d` (not `position`).
    func text(_ d: ProjectionDimension) -> String {
        switch d {
        case .adUnit: adUnit
        case .formatId: formatId
        case .assetKey: assetKey
        case .adapter: adapter
        case .label: label
        case .errorCode: errorCode
        case .position: String(position)
        }
    }

    /// Rows are told apart by the bytes of their strings, as PostgreSQL's primary keys and
    /// GROUP BY tell them apart; Swift's `String ==` would merge two ad units that differ only
    /// in their Unicode normalisation (é and e + ◌́) into one row.
    public static func == (a: ProjectionKey, b: ProjectionKey) -> Bool {
        a.table == b.table && a.trafficClass == b.trafficClass && a.quarterHour == b.quarterHour
            && a.adUnit.hasSameBytes(as: b.adUnit) && a.formatId.hasSameBytes(as: b.formatId)
            && a.assetKey.hasSameBytes(as: b.assetKey) && a.adapter.hasSameBytes(as: b.adapter) && a.label.hasSameBytes(as: b.label)
            && a.errorCode.hasSameBytes(as: b.errorCode) && a.position == b.position
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(table)
        hasher.combine(trafficClass)
        hasher.combine(quarterHour)
        Self.combine(adUnit, into: &hasher)
        Self.combine(formatId, into: &hasher)
        Self.combine(assetKey, into: &hasher)
        Self.combine(adapter, into: &hasher)
        Self.combine(label, into: &hasher)
        Self.combine(errorCode, into: &hasher)
        hasher.combine(position)
    }

    private static func combine(_ part: String, into hasher: inout Hasher) {
        hasher.combine(part.utf8.count)
        let done: Void? = part.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if done == nil {
            for byte in part.utf8 { hasher.combine(byte) }
        }
    }
}

/// A row's measures; unused lanes stay zero. SIMD makes adding and subtracting rows cheap.
///
/// Every table's measures must fit its lanes: `MeasureLaneTests` fails when one outgrows them.
public typealias Measures = SIMD32<Int64>

extension String {
    /// Whether the two strings have the same UTF-8 bytes: how PostgreSQL tells text apart, where
    /// `==` (Unicode canonical equivalence) calls é and e + ◌́ equal.
    func hasSameBytes(as other: String) -> Bool {
        guard utf8.count == other.utf8.count else { return false }
        let compared: Bool?? = utf8.withContiguousStorageIfAvailable { x in
            other.utf8.withContiguousStorageIfAvailable { y in x.elementsEqual(y) }
        }
        if let compared, let compared { return compared }
        return utf8.elementsEqual(other.utf8)
    }
}

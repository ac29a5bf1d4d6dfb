import Metrics
import Synchronization

/// Answers report queries from the projection tables (never from the log).
///
/// Read your writes: a report first waits (at most `maxWait`) until the projections hold
/// every event that was committed when it was asked, so a report asked right after a `200`
/// from ingestion counts that batch. It stops waiting early when events are ready for the
/// projector but the checkpoint has not moved for `stallLimit` (no projector is running),
/// and then answers with what the projections hold; the lag says how far behind that is.
/// While the projector waits for a transaction open elsewhere (the log's ordering rule) the
/// report waits too, up to `maxWait`.
public struct Reports: Sendable {
    private let pool: ConnectionPool
    public let maxWait: Duration
    public let stallLimit: Duration
    /// Time to answer each report, the wait for the projections included.
    private let durations: [ReportKind: Timer]

    public init(pool: ConnectionPool, maxWait: Duration = LogCursor.defaultReportWait, stallLimit: Duration = LogCursor.defaultStallLimit) {
        self.pool = pool
        self.maxWait = maxWait
        self.stallLimit = stallLimit
        durations = Dictionary(uniqueKeysWithValues: ReportKind.allCases.map {
            ($0, Timer(label: "tracker_report_duration_seconds", dimensions: [("report", $0.rawValue)]))
        })
    }

    /// The report `query` asks for.
    ///
    /// With `networks` (a scoped key: PROTOCOL.md 11), only the rows of those networks' ad units,
    /// each what an unscoped key sees for it, and the lag of those networks only.
    ///
    /// - Throws: `ReportQueryError.unknownTimeZone` for a zone the database does not know,
    ///   `ReportError` when the projections cannot answer or the `adUnit` filter is outside
    ///   `networks`, or a `DatabaseError`.
    public func run(_ query: ReportQuery, networks: NetworkScope? = nil) async throws -> ReportResult {
        let started = ContinuousClock.now
        defer { durations[query.kind]?.recordNanoseconds((ContinuousClock.now - started).nanoseconds) }
        try ReportError.checkFilter(query.adUnit, within: networks)
        var query = query
        if !query.isUTCDays {
            query.timeZone = try await TimeZoneCatalog.shared.canonicalName(query.timeZone, pool: pool)
        }
        let spec = ReportSQL.specs[query.kind]!
        let statements = ReportSQL.statements[query.kind]!
        let classes = "{" + TrafficClass.classes(includeTest: query.includeTest).map { String($0.rawValue) }.joined(separator: ",") + "}"
        var parameters: [Parameter] = [.text(query.from.description), .text(query.to.description), .text(classes),
                                       query.adUnit.map(Parameter.text) ?? .null, query.formatId.map(Parameter.text) ?? .null,
                                       networks?.arrayParameter ?? .null, query.adUnitLevel.map { .text(String($0)) } ?? .null]
        var dimensions = spec.dimensions
        var local: LocalSegments.Segments?
        if !query.isUTCDays {
            let segments = try await LocalSegments.shared.segments(zone: query.timeZone, from: query.from, to: query.to,
                                                                   byHour: query.granularity == .hour, pool: pool)
            parameters += segments.parameters
            if query.granularity == .hour { dimensions.insert("hour", at: 1) }
            local = segments
        }
        let arguments = parameters
        let columnCount = dimensions.count + spec.measureNames.count
        let ((rows, ivtRules), lag) = try await LogCursor(pool: pool).readingYourWrites(maxWait: maxWait, stallLimit: stallLimit,
                                                                                        networks: networks) { [local] connection in
            let state = try connection.query(ReportSQL.projectionState)
            if local != nil, state.string(0, 0) != "t" {
                throw ReportError.quarterHoursMissing
            }
            let ivtRules = Int(state.int64(0, 1) ?? 0)
            var out: [[ReportValue]] = []
            if let local {
                let r = try connection.query(local.cutsOfBlock == nil ? statements.rows : statements.cuts, arguments, binaryResults: true)
                out = try local.sum(r, dimensions: Array(spec.textDimensions.dropFirst()), lanes: spec.lanes, width: spec.width,
                                    columns: columnCount, appendMeasures: spec.appendMeasures)
                return (out, ivtRules)
            }
            let r = try connection.query(statements.days, arguments, binaryResults: false)
            let columns = spec.dimensions.count
            out.reserveCapacity(r.rowCount)
            for row in 0..<r.rowCount {
                var dims: [ReportValue] = (0..<columns).map { column in
                    let text = r.string(row, column) ?? ""
                    return spec.textDimensions[column] ? .text(text) : .count(Int64(text) ?? 0)
                }
                let counts = (columns..<r.columnCount).map { r.int64(row, $0) ?? 0 }
                spec.appendMeasures(counts[...], &dims)
                out.append(dims)
            }
            return (out, ivtRules)
        }
        return ReportResult(query: query, columns: dimensions + spec.measureNames, rows: rows,
                            totals: dimensions.map { _ in .label } + spec.measureTotals, lag: lag, ivtRules: ivtRules)
    }
}

extension Reports {
    /// The tz database's spelling of zone `name`.
    ///
    /// - Throws: `ReportQueryError.unknownTimeZone` when the database does not know it.
    public func timeZone(_ name: String) async throws -> String {
        guard ReportQuery.isZoneName(name) else { throw ReportQueryError.unknownTimeZone(name) }
        return try await TimeZoneCatalog.shared.canonicalName(name, pool: pool)
    }
}

/// Why the projections cannot answer a report that is well asked.
public enum ReportError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The projections were made before the tracker kept quarter hours, so only UTC days can
    /// be reported until `tracker rebuild` has run.
    case quarterHoursMissing
    /// A scoped key asked for an ad unit (or prefix) outside its networks (`403`).
    case outsideNetworks(filter: String)

    /// Refuses an `adUnit` filter (or prefix) outside a scoped key's `networks`: what every
    /// report, the reconciliation's included, answers `403` before it reads anything.
    public static func checkFilter(_ adUnit: String?, within networks: NetworkScope?) throws(ReportError) {
        if let networks, let adUnit, !networks.contains(adUnit: adUnit) { throw .outsideNetworks(filter: adUnit) }
    }

    public var description: String {
        switch self {
        case .outsideNetworks(let filter):
            "adUnit \(filter) belongs to network \(NetworkScope.network(of: filter)), which this key cannot read: "
                + "a key scoped to networks reads their ad units only"
        case .quarterHoursMissing:
            "these projections were made before the tracker kept quarter hours, so they can report UTC days only; "
                + "run tracker rebuild once to report in other time zones and by hour"
        }
    }
}

/// The zones the database knows (`pg_timezone_names`), read once per process: reports cut days
/// with PostgreSQL's `AT TIME ZONE`, so a zone is valid exactly when that knows it.
final class TimeZoneCatalog: Sendable {
    static let shared = TimeZoneCatalog()

    /// Lower-cased name to the name as the tz database spells it.
    private let names = Mutex<[String: String]?>(nil)

    /// The tz database's spelling of `name` (matched case-insensitively, as PostgreSQL does).
    func canonicalName(_ name: String, pool: ConnectionPool) async throws -> String {
        if let known = names.withLock({ $0 }) { return try Self.lookUp(name, in: known) }
        let loaded: [String: String] = try await pool.withConnection { connection in
            let r = try connection.query("SELECT name FROM pg_timezone_names")
            var out: [String: String] = [:]
            for row in 0..<r.rowCount {
                guard let n = r.string(row, 0), ReportQuery.isZoneName(n), !n.hasPrefix("posix/"), !n.hasPrefix("right/") else { continue }
                out[n.lowercased()] = n
            }
            return out
        }
        names.withLock { $0 = loaded }
        return try Self.lookUp(name, in: loaded)
    }

    private static func lookUp(_ name: String, in names: [String: String]) throws(ReportQueryError) -> String {
        guard let canonical = names[name.lowercased()] else { throw .unknownTimeZone(name) }
        return canonical
    }
}

enum ReportSQL {
    struct Spec: Sendable {
        var dimensions: [String]
        /// Whether each dimension is text (else an integer: the waterfall's `position`).
        var textDimensions: [Bool]
        var measureNames: [String]
        /// How each measure column adds up in a totals row.
        var measureTotals: [ReportTotal]
        /// UTC days, from the day table.
        var sql: String
        /// Local days or hours: the half-day rows of the segments' blocks ($8 first, $9 last),
        /// whole, which `LocalSegments.Segments.sum` cuts and sums by label and key.
        var localRows: String
        /// Local days: the same rows with two elements of their counts, each half day's cut
        /// ($10, by half day from $8) and its total, all a local day needs of a half day.
        var localCuts: String
        /// Each summed measure's place (in SELECT order) among the `width` measures of a
        /// half-day row's counts.
        var lanes: [Int]
        var width: Int
        /// Appends the report's measures, made of the summed counts (in SELECT order), to a row.
        var appendMeasures: @Sendable (ArraySlice<Int64>, inout [ReportValue]) -> Void
    }

    /// One of a report's measure columns: a measure of the table, summed over the report's
    /// rows; a ratio of two of them (which the report must show); or another value computed
    /// from the row's summed measures, with how it adds up in a totals row.
    enum Column<M: ProjectionMeasure> {
        case sum(M)
        case ratio(String, M, over: M)
        case computed(String, total: ReportTotal, @Sendable (Sums<M>) -> ReportValue)
    }

    /// A report row's summed measures, by measure.
    struct Sums<M: ProjectionMeasure> {
        fileprivate let values: ArraySlice<Int64>
        fileprivate let position: [M: Int]
        subscript(_ measure: M) -> Int64 { values[values.startIndex + position[measure]!] }
    }

    /// The rows every report keeps, whatever its time: the classes ($3), the `adUnit` filter
    /// ($4: an ad unit, or with a trailing `/` every ad unit under that path), the format ($5) and
    /// a scoped key's networks ($6, the ad unit's first segment).
    static let rowFilters = """
          AND traffic_class = ANY($3::int2[])
          AND ($4::text IS NULL OR ad_unit = $4::text OR (right($4::text, 1) = '/' AND starts_with(ad_unit, $4::text)))
          AND ($5::text IS NULL OR format_id = $5::text)
          AND ($6::text[] IS NULL OR split_part(ad_unit, '/', 2) = ANY($6::text[]))
        """

    static let filters = """
        WHERE day BETWEEN $1::date AND $2::date
        \(rowFilters)
        """

    /// The row filters of a local-time report; the half days come from the segments ($8 first,
    /// $9 last), whose days are those asked ($1 to $2) already. $1 and $2 stay referenced so
    /// that every report takes the same parameters.
    static let quartersFilters = """
        WHERE $1::date <= $2::date
          AND q.quarters_from BETWEEN timestamptz '1970-01-01 00:00:00+00' + $8::int8 * interval '12 hours'
                                  AND timestamptz '1970-01-01 00:00:00+00' + $9::int8 * interval '12 hours'
        \(rowFilters)
        """

    /// A row's ad unit as the report shows it: as stored, or rolled up to its first $7 segments
    /// after the network code (`adUnitLevel`: `/1234567/news/sports` is `/1234567/news` at
    /// level 1), so that the rows under one path sum into one.
    static func adUnit(_ column: String) -> String {
        "CASE WHEN $7::int IS NULL THEN \(column) ELSE array_to_string((string_to_array(\(column), '/'))[1:$7::int + 2], '/') END"
    }

    /// Whether the quarter-hour tables cover every projected event (`ReportError.quarterHoursMissing`),
    /// and the rule set the projections were computed with (every report names it).
    static let projectionState = "SELECT quarter_hours_complete, ivt_rules FROM projection_state"

    /// Every report's spec, made once.
    static let specs = Dictionary(uniqueKeysWithValues: ReportKind.allCases.map { ($0, spec($0)) })

    /// Each report's three statements (UTC days, whole half-day rows, their cuts), named after
    /// it so that each is prepared once per connection rather than parsed and analysed on
    /// every call.
    static let statements = Dictionary(uniqueKeysWithValues: specs.map { kind, spec in
        (kind, (days: PreparedStatement(name: "tracker_report_\(kind.rawValue)_days", sql: spec.sql),
                rows: PreparedStatement(name: "tracker_report_\(kind.rawValue)_rows", sql: spec.localRows),
                cuts: PreparedStatement(name: "tracker_report_\(kind.rawValue)_cuts", sql: spec.localCuts)))
    })

    static func spec(_ kind: ReportKind) -> Spec {
        switch kind {
        case .summary:
            spec(["adUnit", "formatId"], [
                .sum(FormatMeasure.impressions), .sum(.duplicateImpressions), .sum(.staleImpressions), .sum(.clicks),
                .sum(.duplicateClicks), .sum(.attributedClicks),
                .computed("unattributedClicks", total: .sum) { .count($0[.clicks] - $0[.attributedClicks]) },
                .ratio("ctr", .attributedClicks, over: .impressions),
                .sum(.adchoicesImpressions), .sum(.adchoicesClicks), .sum(.videoPlays), .sum(.videoEnds),
                .sum(.givtImpressions), .sum(.givtClicks),
            ])
        case .assets:
            spec(["adUnit", "formatId", "assetKey"], AssetMeasure.allCases.map(Column.sum))
        case .sources:
            spec(["adUnit", "adapter"], SourceMeasure.allCases.map(Column.sum))
        case .adchoices:
            spec(["adUnit", "formatId"], [
                .sum(FormatMeasure.eeaReservationImpressions), .sum(.withAdChoices),
                .ratio("share", .withAdChoices, over: .eeaReservationImpressions),
                .sum(.adchoicesClicks),
            ])
        case .ivt:
            spec(["adUnit", "formatId", "label"], IVTMeasure.allCases.map(Column.sum))
        case .funnel:
            spec(["adUnit"], [
                .sum(FunnelMeasure.requests), .sum(.adsRequested), .sum(.filledRequests), .sum(.failedRequests),
                .sum(.unansweredRequests), .ratio("fillRate", .filledRequests, over: .requests),
                .sum(.loadedAds), .sum(.shownAds), .ratio("showRate", .shownAds, over: .loadedAds),
                .computed("loadLatencyP50Ms", total: .empty) { percentile(50, FunnelMeasure.latencies, $0) },
                .computed("loadLatencyP95Ms", total: .empty) { percentile(95, FunnelMeasure.latencies, $0) },
            ], alsoSummed: FunnelMeasure.latencies)
        case .failures:
            spec(["adUnit", "errorCode"], FailureMeasure.allCases.map(Column.sum))
        case .waterfall:
            spec(["adUnit", "adapter", "position"], [
                .sum(WaterfallMeasure.attempts), .sum(.loaded), .sum(.failed), .sum(.timeouts),
                .ratio("fillRate", .loaded, over: .attempts),
                .computed("latencyP50Ms", total: .empty) { percentile(50, WaterfallMeasure.latencies, $0) },
                .computed("latencyP95Ms", total: .empty) { percentile(95, WaterfallMeasure.latencies, $0) },
            ], alsoSummed: WaterfallMeasure.latencies)
        }
    }

    /// The `p`th percentile (PROTOCOL.md 10) of the latencies a row counts per bucket.
    static func percentile<M: ProjectionMeasure>(_ p: Int, _ buckets: [M], _ sums: Sums<M>) -> ReportValue {
        LatencyBuckets.percentile(p, of: buckets.map { sums[$0] }).map { .count(Int64($0)) } ?? .missing
    }

    /// A report over `M`'s table: one row per day and `dimensions`, in that order (bytewise; an
    /// integer dimension by its value), leaving out rows whose summed measures are all zero.
    /// `alsoSummed` are measures the computed columns read but the report does not show.
    static func spec<M: ProjectionMeasure>(_ dimensions: [String], _ columns: [Column<M>], alsoSummed: [M] = []) -> Spec {
        let summed: [M] = columns.compactMap { if case .sum(let m) = $0 { m } else { nil } } + alsoSummed
        let position = Dictionary(uniqueKeysWithValues: summed.enumerated().map { ($1, $0) })
        let dimensionKinds = dimensions.map { ProjectionDimension(rawValue: $0)! }
        let dims = dimensionKinds.map(\.column)
        let dimensionValues = dimensionKinds.map { $0 == .adUnit ? "\(adUnit("ad_unit")) AS ad_unit" : $0.column }
        let sums = summed.map { "sum(\($0.column))" }
        let dimensionList = dims.joined(separator: ", ")
        let having = sums.map { "\($0) <> 0" }.joined(separator: " OR ")
        let order = dimensionKinds.map { $0.isText ? "\($0.column) COLLATE \"C\"" : $0.column }.joined(separator: ", ")
        let sql = """
            SELECT to_char(day, 'YYYY-MM-DD'), \(dimensionList),
                   \(sums.joined(separator: ", "))
            FROM (SELECT day, \(dimensionValues.joined(separator: ", ")), \(summed.map(\.column).joined(separator: ", "))
                  FROM \(M.table.tableName(.day))
                  \(filters)) AS t
            GROUP BY day, \(dimensionList)
            HAVING \(having)
            ORDER BY day, \(order)
            """
        // A local day or hour is a slice of one or two half-day rows of running counts, which
        // the segments say (LocalSegments, docs/REPORTS.md "Time zones and hours"). PostgreSQL
        // sends the rows whole, their counts as the bytes it stores; the tracker cuts the
        // slices, sums them by label and key, filters and sorts, with integer sums and ranks
        // where SQL would sum numerics and sort collated text.
        let keyColumns = dimensionKinds.map { $0 == .adUnit ? adUnit("q.ad_unit") : "q.\($0.column)" }.joined(separator: ", ")
        let localRows = """
            SELECT q.quarters_from, \(keyColumns), q.mask, q.counts
            FROM \(M.table.tableName(.quarters)) AS q
            \(quartersFilters)
            """
        // A report by day needs at most three of a row's 49 running counts per measure, the
        // first being 0: it reads the cut ($10, by half day from $8) and the total, not the whole
        // row, which for a month of rows would be megabytes to receive for a few hundred sums.
        // The cut's entry is found from the mask as QuarterBlock.entry does (the count of set
        // bits below the cut); a cut before the row's first entry is all zeros.
        // Where a table keeps its totals inline, a cut at the row's last entry (a half day the
        // local day takes whole) is its total too, and neither reads the counts in TOAST.
        let element = M.allCases.count * 8
        let zeros = "'\\x" + String(repeating: "00", count: element) + "'::bytea"
        let total = M.table.keepsTotalsInline ? "q.totals" : "substring(q.counts FROM octet_length(q.counts) - \(element - 1) FOR \(element))"
        let lastEntry = M.table.keepsTotalsInline ? "WHEN c.n * \(element) = octet_length(q.counts) THEN q.totals " : ""
        let localCuts = """
            SELECT q.quarters_from, \(keyColumns),
                   CASE WHEN c.n = 0 THEN \(zeros) \(lastEntry)ELSE substring(q.counts FROM (c.n - 1) * \(element) + 1 FOR \(element)) END
                   || \(total)
            FROM \(M.table.tableName(.quarters)) AS q,
                 LATERAL (SELECT bit_count((q.mask & ((1::int8 << ($10::int4[])[(extract(epoch FROM q.quarters_from) / 43200)::int8 - $8::int8 + 1])
                                                     - 1))::bit(64))::int4 AS n) AS c
            \(quartersFilters)
            """
        let names = columns.map { column in
            switch column {
            case .sum(let m): m.name
            case .ratio(let name, _, _), .computed(let name, _, _): name
            }
        }
        let totals = columns.map { column -> ReportTotal in
            switch column {
            case .sum: .sum
            case .ratio(_, let numerator, let denominator): .ratio(of: numerator.name, over: denominator.name)
            case .computed(_, let total, _): total
            }
        }
        // Each summed column's place in the counts, found once, not looked up per column and row
        // (an hourly report has thousands of rows).
        let places: [Int?] = columns.map { column in
            if case .sum(let m) = column { position[m]! } else { nil }
        }
        let appendMeasures: @Sendable (ArraySlice<Int64>, inout [ReportValue]) -> Void = { counts, out in
            let row = Sums(values: counts, position: position)
            for (column, place) in zip(columns, places) {
                if let place {
                    out.append(.count(counts[counts.startIndex + place]))
                } else if case .ratio(_, let numerator, let denominator) = column {
                    out.append(.ratio(of: row[numerator], over: row[denominator]))
                } else if case .computed(_, _, let compute) = column {
                    out.append(compute(row))
                }
            }
        }
        return Spec(dimensions: ["day"] + dimensions, textDimensions: [true] + dimensionKinds.map(\.isText), measureNames: names, measureTotals: totals, sql: sql,
                    localRows: localRows, localCuts: localCuts, lanes: summed.map(\.lane), width: M.allCases.count,
                    appendMeasures: appendMeasures)
    }
}

/// Which slice of which half-day rows makes each local day (or hour) of a report: the report's
/// segments. They depend only on the zone's rules and the range, so they are computed once
/// (by PostgreSQL's `AT TIME ZONE`, the zone database every report uses) and kept.
///
/// Each UTC quarter hour of the range falls in one local day and one local hour (every offset in
/// use is a whole number of quarter hours); each run of consecutive quarter hours of one half
/// day in one local day or hour is one slice of that half day's running counts. It is mostly one
/// run; where a zone fell back across midnight (St. John's, at 00:01 until 2011) the old day's
/// last hour comes again after the new day began, and the day has two runs in that half day.
final class LocalSegments: Sendable {
    static let shared = LocalSegments()

    struct Key: Hashable {
        var zone: String
        var from: String
        var to: String
        var byHour: Bool
    }

    /// A report's segments: which slice of which half day makes which local day or hour.
    struct Segments: Sendable {
        /// The report's distinct labels (the day, and the hour when by hour).
        var labels: [[String]] = []
        /// Each label's place in bytewise order of the labels.
        var labelRank: [Int] = []
        /// Each segment's label (a position in `labels`; the half days of one local day are two
        /// segments with one label), and where in a row's counts as the report reads them its
        /// first and past-last running count are (-1: the first, which is 0): its events are
        /// count `end` less count `start` of each measure. Reading rows whole, that is the
        /// running count's number (0 to 48), found in the row through its mask; reading cuts, 0
        /// for the half day's cut and 1 for its total.
        var segmentLabel: [Int] = [], start: [Int] = [], end: [Int] = []
        /// When every half day is cut at most once (reports by day), the element each half day is
        /// cut at (its total's when it is not), and the report reads only those and the totals
        /// (`Spec.localCuts`); otherwise `nil`, and it reads rows whole.
        var cutsOfBlock: [Int]?
        /// The first half day (since the epoch) with a segment, and each half day's segments from
        /// it on (positions in the arrays above).
        var firstBlock: Int64 = 0
        var segmentsOfBlock: [Range<Int>] = []
        /// $8 and $9 of `Spec.localRows`, the first and last half day, and $10 when reading cuts.
        var parameters: [Parameter] = []

        /// The report's rows from `r` (`Spec.localRows` or `Spec.localCuts`, binary: the half
        /// day's start, the `dimensions` key columns, the counts of `width` measures): the
        /// measures at `lanes` cut by the segments and summed by labels and key, rows whose
        /// counts are all zero left out, in bytewise order of labels and key. Each row is its
        /// labels, its key values and what `appendMeasures` makes of its sums (`columns` in all).
        func sum(_ r: QueryResult, dimensions textDimensions: [Bool], lanes: [Int], width: Int, columns: Int,
                 appendMeasures: (ArraySlice<Int64>, inout [ReportValue]) -> Void) throws -> [[ReportValue]] {
            let dimensions = textDimensions.count
            let measures = lanes.count, whole = cutsOfBlock == nil
            guard (1...Key.maxDimensions).contains(dimensions), r.columnCount == dimensions + (whole ? 3 : 2),
                  lanes.allSatisfy({ (0..<width).contains($0) }) else { throw Self.unreadable }
            // Each cell's (label and key) sums are `measures` consecutive places of `totals`, the
            // cell's number times `measures` on: one lookup per segment of a row, and no array
            // made per row.
            var cells: [Key] = [], cellNumbers: [Key: Int] = [:], totals: [Int64] = []
            // At most a cell per segment of each row read.
            cellNumbers.reserveCapacity(r.rowCount * (start.count / max(segmentsOfBlock.count, 1) + 1))
            func counts(of number: Int) -> ArraySlice<Int64> { totals[(number * measures)..<((number + 1) * measures)] }
            // Values are told apart by their bytes, as PostgreSQL's GROUP BY does (two Swift
            // strings can be equal with different bytes: é and e + ◌́).
            var valueBytes: [[UInt8]] = [], numbers: [[UInt8]: Int] = [:]
            // Consecutive rows mostly share key values (the rows come in key order within a half
            // day), so each column's value is first compared with the row before's, in place.
            var previous = Array(repeating: (bytes: UnsafeRawBufferPointer(start: nil, count: 0), number: -1), count: dimensions)
            for row in 0..<r.rowCount {
                guard let microseconds = BinaryValue.microsecondsSince1970(timestamptz: r.bytes(row, 0)) else { throw Self.unreadable }
                let (block, offset) = microseconds.quotientAndRemainder(dividingBy: QuarterBlock.microseconds)
                let place = Int(block - firstBlock)
                guard offset == 0, segmentsOfBlock.indices.contains(place) else { continue }
                let countBytes = r.bytes(row, r.columnCount - 1)
                var mask: UInt64 = 0
                if whole {
                    guard let stored = ByteReader.int64(r.bytes(row, 1 + dimensions)),
                          QuarterBlock.fits(mask: UInt64(bitPattern: stored), counts: countBytes.count, width: width) else { throw Self.unreadable }
                    mask = UInt64(bitPattern: stored)
                } else {
                    guard countBytes.count == 2 * width * 8 else { throw Self.unreadable }
                }
                var key = Key(label: 0)
                for column in 0..<dimensions {
                    let bytes = r.bytes(row, 1 + column)
                    let number: Int
                    if previous[column].number >= 0, bytes.elementsEqual(previous[column].bytes) {
                        number = previous[column].number
                    } else {
                        let owned = Array(bytes)
                        if let known = numbers[owned] {
                            number = known
                        } else {
                            number = valueBytes.count
                            numbers[owned] = number
                            valueBytes.append(owned)
                        }
                        previous[column] = (bytes, number)
                    }
                    key.values[column] = number
                }
                for segment in segmentsOfBlock[place] {
                    key.label = segmentLabel[segment]
                    let first: Int
                    if let number = cellNumbers[key] {
                        first = number * measures
                    } else {
                        cellNumbers[key] = cells.count
                        first = cells.count * measures
                        cells.append(key)
                        totals.append(contentsOf: repeatElement(0, count: measures))
                    }
                    // The entries that hold the segment's first and past-last running counts (-1: 0).
                    let (from, to) = whole
                        ? (QuarterBlock.entry(mask, element: start[segment]), QuarterBlock.entry(mask, element: end[segment]))
                        : (start[segment], end[segment])
                    for (m, lane) in lanes.enumerated() {
                        let before = from < 0 ? 0 : QuarterBlock.value(countBytes, from * width + lane)
                        let after = to < 0 ? 0 : QuarterBlock.value(countBytes, to * width + lane)
                        totals[first + m] += after - before
                    }
                }
            }
            // Bytewise order, compared as ranks: the distinct labels and key values are few and
            // the rows many, so each string is compared once, not once per pair of rows.
            let valueRank = Self.ranks(valueBytes) { $0.lexicographicallyPrecedes($1) }
            let values = valueBytes.map { String(decoding: $0, as: UTF8.self) }
            let kept = cells.indices.filter { counts(of: $0).contains { $0 != 0 } }
            let ordered = kept.sorted { a, b in
                let (x, y) = (cells[a], cells[b])
                if x.label != y.label { return labelRank[x.label] < labelRank[y.label] }
                for column in 0..<dimensions where x.values[column] != y.values[column] {
                    return valueRank[x.values[column]] < valueRank[y.values[column]]
                }
                return false
            }
            // An integer key column comes as a binary int4 (its bytes sort as its value: it is never negative).
            let texts = values.map(ReportValue.text), labelTexts = labels.map { $0.map(ReportValue.text) }
            let integers = valueBytes.map { bytes in
                ReportValue.count(bytes.count == 4 ? Int64(bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }) : 0)
            }
            return ordered.map { number in
                let key = cells[number]
                var row: [ReportValue] = []
                row.reserveCapacity(columns)
                row.append(contentsOf: labelTexts[key.label])
                for column in 0..<dimensions {
                    row.append(textDimensions[column] ? texts[key.values[column]] : integers[key.values[column]])
                }
                appendMeasures(counts(of: number), &row)
                return row
            }
        }

        /// A report row's label and key values (numbered in the order they first appear; -1
        /// where a report has fewer key columns): a fixed-size value, so finding a row's sums
        /// makes no array.
        struct Key: Hashable {
            static let maxDimensions = SIMD3<Int>.scalarCount
            var label: Int
            var values = SIMD3<Int>(repeating: -1)
        }

        /// Each item's place in `items` sorted by `precedes`.
        static func ranks<T>(_ items: [T], by precedes: (T, T) -> Bool) -> [Int] {
            var rank = Array(repeating: 0, count: items.count)
            for (place, index) in items.indices.sorted(by: { precedes(items[$0], items[$1]) }).enumerated() { rank[index] = place }
            return rank
        }

        /// Reads cuts (`cutsOfBlock`) when no half day has running counts other than its first,
        /// its total and one more at the segments' ends, and makes the segments' ends places in
        /// what is read.
        mutating func readCuts() {
            let total = Int(QuarterBlock.quarters)
            var cuts: [Int] = []
            for segments in segmentsOfBlock {
                let inner = Set(segments.flatMap { [start[$0], end[$0]] }).subtracting([0, total])
                guard inner.count <= 1 else { return }
                cuts.append(inner.first ?? total)
            }
            func place(_ element: Int) -> Int { element == 0 ? -1 : element == total ? 1 : 0 }
            for segment in start.indices { (start[segment], end[segment]) = (place(start[segment]), place(end[segment])) }
            cutsOfBlock = cuts
        }

        private static var unreadable: DatabaseError {
            DatabaseError(.unexpectedResult, serverMessage: "report: an unreadable half-day row")
        }
    }

    /// Kept segments; a few hundred ranges and zones at most in practice, emptied past that.
    private let kept = Mutex<[Key: Segments]>([:])
    private static let keptLimit = 512

    func segments(zone: String, from: Day, to: Day, byHour: Bool, pool: ConnectionPool) async throws -> Segments {
        let key = Key(zone: zone, from: from.description, to: to.description, byHour: byHour)
        if let known = kept.withLock({ $0[key] }) { return known }
        let segments = try await pool.withConnection { connection in
            let r = try connection.query(Self.sql, [key.from, key.to, zone, byHour ? "true" : "false", zone == "UTC" ? "true" : "false"])
            var segments = Segments()
            var positions: [[String]: Int] = [:]
            var blockOfSegment: [Int64] = []
            for row in 0..<r.rowCount {
                guard let block = r.int64(row, 0), let day = r.string(row, 1), let start = r.int64(row, 3), let end = r.int64(row, 4),
                      (0...Int64(QuarterBlock.quarters)).contains(start), (start...Int64(QuarterBlock.quarters)).contains(end),
                      blockOfSegment.last.map({ $0 <= block }) ?? true else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "report: an unreadable segment")
                }
                let labels = byHour ? [day, r.string(row, 2) ?? ""] : [day]
                if let known = positions[labels] {
                    segments.segmentLabel.append(known)
                } else {
                    positions[labels] = segments.labels.count
                    segments.segmentLabel.append(segments.labels.count)
                    segments.labels.append(labels)
                }
                segments.start.append(Int(start))
                segments.end.append(Int(end))
                blockOfSegment.append(block)
            }
            // The segments come in order of half day: each half day's are consecutive.
            if let first = blockOfSegment.first, let last = blockOfSegment.last {
                segments.firstBlock = first
                var next = 0
                segments.segmentsOfBlock = (first...last).map { block in
                    let from = next
                    while next < blockOfSegment.count, blockOfSegment[next] == block { next += 1 }
                    return from..<next
                }
            }
            segments.readCuts()
            // Bytewise, as PostgreSQL's COLLATE "C" (the labels are ASCII).
            segments.labelRank = Segments.ranks(segments.labels) { $0.lexicographicallyPrecedes($1) }
            let (first, last) = (segments.firstBlock, segments.firstBlock + Int64(segments.segmentsOfBlock.count) - 1)
            segments.parameters = [.text(String(first)), .text(String(last))]
            if let cuts = segments.cutsOfBlock {
                var array = BinaryArray(.int4, capacity: cuts.count)
                for cut in cuts { array.append(Int32(cut)) }
                segments.parameters.append(array.parameter)
            }
            return segments
        }
        kept.withLock { cache in
            if cache.count >= Self.keptLimit { cache.removeAll() }
            cache[key] = segments
        }
        return segments
    }

    /// $1 first and $2 last local day, $3 zone, $4 by hour, $5 the zone is UTC (hours written
    /// with Z). Columns: half day, day label, hour label, first and past-last running count
    /// (from 0) of each run of consecutive quarter hours, in order of half day and first count. An hour
    /// is the local clock's hour at the zone's offset then: the repeated hour of a fall-back day
    /// is two, one per offset, labelled HH:00 with that offset (where an offset changes by half
    /// an hour, as on Lord Howe Island, the label names the clock hour, not the instant the
    /// part began).
    static let sql = """
        SELECT block, day, hour, min(idx), max(idx) + 1
        FROM (
            SELECT block, idx, day, hour, idx - row_number() OVER (PARTITION BY block, day, hour ORDER BY idx) AS run
            FROM (
                SELECT b.block, (q.n - b.block * 48)::int4 AS idx, to_char(l.local, 'YYYY-MM-DD') AS day,
                       CASE WHEN $4::boolean THEN
                           to_char(date_trunc('hour', l.local), 'YYYY-MM-DD"T"HH24:MI:SS')
                           || CASE WHEN $5::boolean THEN 'Z'
                                   ELSE CASE WHEN l.off < 0 THEN '-' ELSE '+' END
                                        || to_char(abs(l.off) / 3600, 'FM00') || ':' || to_char(abs(l.off) % 3600 / 60, 'FM00') END
                       ELSE '' END AS hour
                FROM generate_series(($1::date - 1)::timestamp AT TIME ZONE 'UTC', ($2::date + 2)::timestamp AT TIME ZONE 'UTC' - interval '15 minutes',
                                     interval '15 minutes') AS s,
                     LATERAL (SELECT s AT TIME ZONE $3::text AS local,
                                     extract(epoch FROM (s AT TIME ZONE $3::text) - (s AT TIME ZONE 'UTC'))::int AS off) AS l,
                     LATERAL (SELECT floor(extract(epoch FROM s) / 900)::int8 AS n) AS q,
                     LATERAL (SELECT floor(q.n / 48.0)::int8 AS block) AS b
                WHERE l.local::date BETWEEN $1::date AND $2::date
            ) slots
        ) runs
        GROUP BY block, day, hour, run
        ORDER BY block, min(idx)
        """
}

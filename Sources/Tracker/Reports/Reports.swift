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
    /// - Throws: `ReportQueryError.unknownTimeZone` for a zone the database does not know,
    ///   `ReportError` when the projections cannot answer, or a `DatabaseError`.
    public func run(_ query: ReportQuery) async throws -> ReportResult {
        let started = ContinuousClock.now
        defer { durations[query.kind]?.recordNanoseconds((ContinuousClock.now - started).nanoseconds) }
        var query = query
        if !query.isUTCDays {
            query.timeZone = try await TimeZoneCatalog.shared.canonicalName(query.timeZone, pool: pool)
        }
        try await LogCursor(pool: pool).waitForProjections(maxWait: maxWait, stallLimit: stallLimit)
        let spec = ReportSQL.specs[query.kind]!
        let classes = "{" + TrafficClass.classes(includeTest: query.includeTest).map { String($0.rawValue) }.joined(separator: ",") + "}"
        var parameters: [Parameter] = [.text(query.from.description), .text(query.to.description), .text(classes),
                                       query.adUnit.map(Parameter.text) ?? .null, query.formatId.map(Parameter.text) ?? .null]
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
        let conninfo = pool.conninfo
        let (rows, ivtRules, lag): ([[ReportValue]], Int, ProjectionLag) = try await pool.withConnection { [local] connection in
            let state = try connection.query(ReportSQL.projectionState)
            if local != nil, state.string(0, 0) != "t" {
                throw ReportError.quarterHoursMissing
            }
            let ivtRules = Int(state.int64(0, 1) ?? 0)
            var out: [[ReportValue]] = []
            if let local {
                let r = try connection.query(spec.localSlices, arguments, binaryResults: true)
                for (labels, counts) in try local.sum(r, dimensions: spec.dimensions.count - 1) {
                    out.append(labels.map(ReportValue.text) + spec.measures(counts))
                }
                return (out, ivtRules, try LogCursor.lag(on: connection, conninfo: conninfo))
            }
            let r = try connection.query(spec.sql, arguments, binaryResults: false)
            let columns = spec.dimensions.count
            out.reserveCapacity(r.rowCount)
            for row in 0..<r.rowCount {
                var dims: [ReportValue] = (0..<columns).map { .text(r.string(row, $0) ?? "") }
                let counts = (columns..<r.columnCount).map { r.int64(row, $0) ?? 0 }
                dims.append(contentsOf: spec.measures(counts))
                out.append(dims)
            }
            return (out, ivtRules, try LogCursor.lag(on: connection, conninfo: conninfo))
        }
        return ReportResult(query: query, columns: dimensions + spec.measureNames, rows: rows, lag: lag, ivtRules: ivtRules)
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

    public var description: String {
        switch self {
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
        var measureNames: [String]
        /// UTC days, from the day table.
        var sql: String
        /// Local days or hours: each slice of the segments ($6 on) of each half-day row, numbered
        /// by its segment, which `LocalSegments.Segments.sum` sums by label and key.
        var localSlices: String
        /// Turns the summed counts (in SELECT order) into the report's measures.
        var measures: @Sendable ([Int64]) -> [ReportValue]
    }

    /// One of a report's measure columns: a measure of the table, summed over the report's
    /// rows, or a value computed from the row's summed measures (which the report must show).
    enum Column<M: ProjectionMeasure> {
        case sum(M)
        case computed(String, @Sendable (Sums<M>) -> ReportValue)
    }

    /// A report row's summed measures, by measure.
    struct Sums<M: ProjectionMeasure> {
        fileprivate let values: [Int64]
        fileprivate let position: [M: Int]
        subscript(_ measure: M) -> Int64 { values[position[measure]!] }
    }

    static func ratio(_ a: Int64, _ b: Int64) -> ReportValue {
        .ratio(b == 0 ? 0 : Double(a) / Double(b))
    }

    static let filters = """
        WHERE day BETWEEN $1::date AND $2::date
          AND traffic_class = ANY($3::int2[])
          AND ($4::text IS NULL OR ad_unit = $4::text)
          AND ($5::text IS NULL OR format_id = $5::text)
        """

    /// The row filters of a local-time report; the half days come from the segments ($6 on),
    /// whose days are those asked ($1 to $2) already. No condition on the segments' own
    /// columns: the planner then counts them from the array and joins the half-day rows by a
    /// hash, reading each row once (with a filter on them it would guess one segment and read
    /// the rows again for every segment, an index scan per local hour). $1 and $2 stay
    /// referenced so that every report takes the same parameters.
    static let quartersFilters = """
        WHERE $1::date <= $2::date
          AND q.quarters_from BETWEEN timestamptz '1970-01-01 00:00:00+00' + $9::int8 * interval '12 hours'
                                  AND timestamptz '1970-01-01 00:00:00+00' + $10::int8 * interval '12 hours'
          AND traffic_class = ANY($3::int2[])
          AND ($4::text IS NULL OR ad_unit = $4::text)
          AND ($5::text IS NULL OR format_id = $5::text)
        """

    /// Whether the quarter-hour tables cover every projected event (`ReportError.quarterHoursMissing`),
    /// and the rule set the projections were computed with (every report names it).
    static let projectionState = "SELECT quarter_hours_complete, ivt_rules FROM projection_state"

    /// The report's dimension names (after `day`) and their columns.
    private static let dimensionColumns = ["adUnit": "ad_unit", "formatId": "format_id", "assetKey": "asset_key", "adapter": "adapter",
                                           "label": "label"]

    /// Every report's spec, made once.
    static let specs = Dictionary(uniqueKeysWithValues: ReportKind.allCases.map { ($0, spec($0)) })

    static func spec(_ kind: ReportKind) -> Spec {
        switch kind {
        case .summary:
            spec(["adUnit", "formatId"], [
                .sum(FormatMeasure.impressions), .sum(.duplicateImpressions), .sum(.staleImpressions), .sum(.clicks),
                .sum(.duplicateClicks), .sum(.attributedClicks),
                .computed("unattributedClicks") { .count($0[.clicks] - $0[.attributedClicks]) },
                .computed("ctr") { ratio($0[.attributedClicks], $0[.impressions]) },
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
                .computed("share") { ratio($0[.withAdChoices], $0[.eeaReservationImpressions]) },
                .sum(.adchoicesClicks),
            ])
        case .ivt:
            spec(["adUnit", "formatId", "label"], IVTMeasure.allCases.map(Column.sum))
        }
    }

    /// A report over `M`'s table: one row per day and `dimensions`, in that order (bytewise),
    /// leaving out rows whose summed measures are all zero.
    static func spec<M: ProjectionMeasure>(_ dimensions: [String], _ columns: [Column<M>]) -> Spec {
        let summed: [M] = columns.compactMap { if case .sum(let m) = $0 { m } else { nil } }
        let position = Dictionary(uniqueKeysWithValues: summed.enumerated().map { ($1, $0) })
        let dims = dimensions.map { dimensionColumns[$0]! }
        let sums = summed.map { "sum(\($0.column))" }
        let dimensionList = dims.joined(separator: ", ")
        let having = sums.map { "\($0) <> 0" }.joined(separator: " OR ")
        let order = dims.map { "\($0) COLLATE \"C\"" }.joined(separator: ", ")
        let sql = """
            SELECT to_char(day, 'YYYY-MM-DD'), \(dimensionList),
                   \(sums.joined(separator: ", "))
            FROM \(M.table.tableName(.day))
            \(filters)
            GROUP BY day, \(dimensionList)
            HAVING \(having)
            ORDER BY day, \(order)
            """
        // A local day or hour is a slice of one or two half-day rows of running counts: the
        // segments ($6 half day, $7 first and $8 past-last element, numbered in that order) say
        // which (LocalSegments, docs/REPORTS.md "Time zones and hours"). PostgreSQL takes the
        // slices, a few elements of each row's arrays; the tracker sums them by label and key,
        // filters and sorts, with integer sums and ranks where SQL would sum numerics and sort
        // collated text.
        let slices = summed.map { "q.\($0.column)[g.hi] - q.\($0.column)[g.lo]" }
        let localSlices = """
            SELECT g.n::int8, \(dims.map { "q.\($0)" }.joined(separator: ", ")), \(slices.joined(separator: ", "))
            FROM unnest($6::int8[], $7::int4[], $8::int4[]) WITH ORDINALITY AS g(block, lo, hi, n)
            JOIN \(M.table.tableName(.quarters)) AS q
              ON q.quarters_from = timestamptz '1970-01-01 00:00:00+00' + g.block * interval '12 hours'
            \(quartersFilters)
            """
        let names = columns.map { column in
            switch column {
            case .sum(let m): m.name
            case .computed(let name, _): name
            }
        }
        // Each summed column's place in the counts, found once, not looked up per column and row
        // (an hourly report has thousands of rows).
        let places: [Int?] = columns.map { column in
            if case .sum(let m) = column { position[m]! } else { nil }
        }
        let measures: @Sendable ([Int64]) -> [ReportValue] = { counts in
            let row = Sums(values: counts, position: position)
            var out: [ReportValue] = []
            out.reserveCapacity(columns.count)
            for (column, place) in zip(columns, places) {
                if let place {
                    out.append(.count(counts[place]))
                } else if case .computed(_, let compute) = column {
                    out.append(compute(row))
                }
            }
            return out
        }
        return Spec(dimensions: ["day"] + dimensions, measureNames: names, sql: sql, localSlices: localSlices, measures: measures)
    }
}

/// Which slice of which half-day rows makes each local day (or hour) of a report: the report's
/// segments. They depend only on the zone's rules and the range, so they are computed once
/// (by PostgreSQL's `AT TIME ZONE`, the zone database every report uses) and kept.
///
/// Each UTC quarter hour of the range falls in one local day and one local hour (every offset in
/// use is a whole number of quarter hours); the quarter hours of one half day that fall in one
/// local day or hour are consecutive, so they are one slice of that half day's running counts.
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
        /// Each segment's labels (a position in `labels`), by its number less one: the half
        /// days of one local day are two segments with one label.
        var labelOfSegment: [Int] = []
        /// Each label's place in bytewise order of the labels.
        var labelRank: [Int] = []
        /// $6 to $10 of `Spec.localSlices`: half days, first and past-last element (1-based) of
        /// each segment, and the first and last half day (the rows' range).
        var parameters: [Parameter] = []

        /// The report's rows from `r` (`Spec.localSlices`, binary: the segment's number, the
        /// `dimensions` key columns, then the slice's counts): summed by labels and key, rows
        /// whose counts are all zero left out, in bytewise order of labels and key.
        func sum(_ r: QueryResult, dimensions: Int) throws -> [(labels: [String], counts: [Int64])] {
            let measures = r.columnCount - 1 - dimensions
            guard (1...Key.maxDimensions).contains(dimensions), measures >= 0 else { throw Self.unreadable }
            // Each key's sums are `measures` consecutive places of `totals`, the key's number
            // times `measures` on: one lookup per row, and no array made per row.
            var keys: [Key] = [], keyNumbers: [Key: Int] = [:], totals: [Int64] = []
            keyNumbers.reserveCapacity(r.rowCount)
            func counts(of number: Int) -> ArraySlice<Int64> { totals[(number * measures)..<((number + 1) * measures)] }
            // Values are told apart by their bytes, as PostgreSQL's GROUP BY does (two Swift
            // strings can be equal with different bytes: é and e + ◌́).
            var valueBytes: [[UInt8]] = [], numbers: [[UInt8]: Int] = [:]
            // Consecutive rows mostly come from one half-day row (the join's segments of it),
            // so each column's value is first compared with the row before's, in place.
            var previous = Array(repeating: (bytes: UnsafeRawBufferPointer(start: nil, count: 0), number: -1), count: dimensions)
            for row in 0..<r.rowCount {
                guard let n = ByteReader.int64(r.bytes(row, 0)), n >= 1, n <= labelOfSegment.count else { throw Self.unreadable }
                var key = Key(label: labelOfSegment[Int(n) - 1])
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
                let first: Int
                if let number = keyNumbers[key] {
                    first = number * measures
                } else {
                    keyNumbers[key] = keys.count
                    first = keys.count * measures
                    keys.append(key)
                    totals.append(contentsOf: repeatElement(0, count: measures))
                }
                for m in 0..<measures {
                    guard let count = ByteReader.int64(r.bytes(row, 1 + dimensions + m)) else { throw Self.unreadable }
                    totals[first + m] += count
                }
            }
            // Bytewise order, compared as ranks: the distinct labels and key values are few and
            // the rows many, so each string is compared once, not once per pair of rows.
            let valueRank = Self.ranks(valueBytes) { $0.lexicographicallyPrecedes($1) }
            let values = valueBytes.map { String(decoding: $0, as: UTF8.self) }
            let kept = keys.indices.filter { counts(of: $0).contains { $0 != 0 } }
            let ordered = kept.sorted { a, b in
                let (x, y) = (keys[a], keys[b])
                if x.label != y.label { return labelRank[x.label] < labelRank[y.label] }
                for column in 0..<dimensions where x.values[column] != y.values[column] {
                    return valueRank[x.values[column]] < valueRank[y.values[column]]
                }
                return false
            }
            return ordered.map { number in
                let key = keys[number]
                var row = labels[key.label]
                row.reserveCapacity(row.count + dimensions)
                for column in 0..<dimensions { row.append(values[key.values[column]]) }
                return (row, Array(counts(of: number)))
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

        private static var unreadable: DatabaseError {
            DatabaseError(.unexpectedResult, serverMessage: "report: an unreadable slice")
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
            var blocks = BinaryArray(.int8, capacity: r.rowCount)
            var lo = BinaryArray(.int4, capacity: r.rowCount), hi = BinaryArray(.int4, capacity: r.rowCount)
            var first = Int64.max, last = Int64.min
            var positions: [[String]: Int] = [:]
            for row in 0..<r.rowCount {
                guard let block = r.int64(row, 0), let day = r.string(row, 1), let start = r.int64(row, 3), let end = r.int64(row, 4) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "report: an unreadable segment")
                }
                let labels = byHour ? [day, r.string(row, 2) ?? ""] : [day]
                if let known = positions[labels] {
                    segments.labelOfSegment.append(known)
                } else {
                    positions[labels] = segments.labels.count
                    segments.labelOfSegment.append(segments.labels.count)
                    segments.labels.append(labels)
                }
                blocks.append(block)
                lo.append(Int32(start))
                hi.append(Int32(end))
                (first, last) = (min(first, block), max(last, block))
            }
            // Bytewise, as PostgreSQL's COLLATE "C" (the labels are ASCII).
            segments.labelRank = Segments.ranks(segments.labels) { $0.lexicographicallyPrecedes($1) }
            segments.parameters = [blocks.parameter, lo.parameter, hi.parameter,
                                   .text(String(first == .max ? 0 : first)), .text(String(last == .min ? -1 : last))]
            return segments
        }
        kept.withLock { cache in
            if cache.count >= Self.keptLimit { cache.removeAll() }
            cache[key] = segments
        }
        return segments
    }

    /// $1 first and $2 last local day, $3 zone, $4 by hour, $5 the zone is UTC (hours written
    /// with Z). Columns: half day, day label, hour label, first and past-last element. An hour
    /// is the local clock's hour at the zone's offset then: the repeated hour of a fall-back day
    /// is two, one per offset, labelled HH:00 with that offset (where an offset changes by half
    /// an hour, as on Lord Howe Island, the label names the clock hour, not the instant the
    /// part began).
    static let sql = """
        SELECT block, day, hour, min(idx) + 1, max(idx) + 2
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
        GROUP BY block, day, hour
        ORDER BY block, min(idx)
        """
}

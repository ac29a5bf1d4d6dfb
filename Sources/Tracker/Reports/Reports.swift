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
            parameters += [.text(String(segments.firstBlock)), .text(String(segments.lastBlock))]
            if query.granularity == .hour { dimensions.insert("hour", at: 1) }
            local = segments
        }
        let columns = dimensions.count
        let arguments = parameters
        let (rows, ivtRules): ([[ReportValue]], Int) = try await pool.withConnection { [local] connection in
            let state = try connection.query(ReportSQL.projectionState)
            if local != nil, state.string(0, 0) != "t" {
                throw ReportError.quarterHoursMissing
            }
            let ivtRules = Int(state.int64(0, 1) ?? 0)
            var out: [[ReportValue]] = []
            if let local {
                let r = try connection.query(spec.localRowsSQL, arguments, binaryResults: true)
                for (labels, counts) in try local.sum(r, dimensions: spec.dimensions.count - 1) {
                    out.append(labels.map(ReportValue.text) + spec.measures(counts))
                }
                return (out, ivtRules)
            }
            let r = try connection.query(spec.sql, arguments, binaryResults: false)
            out.reserveCapacity(r.rowCount)
            for row in 0..<r.rowCount {
                var dims: [ReportValue] = (0..<columns).map { .text(r.string(row, $0) ?? "") }
                let counts = (columns..<r.columnCount).map { r.int64(row, $0) ?? 0 }
                dims.append(contentsOf: spec.measures(counts))
                out.append(dims)
            }
            return (out, ivtRules)
        }
        let lag = try await LogCursor(pool: pool).lag()
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
        /// Local days or hours: the quarters table's half-day rows of the range ($6 first and $7
        /// last half day), which `LocalSegments.Segments.sum` slices and sums.
        var localRowsSQL: String
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

    /// The row filters of a local-time report: the half days $6 to $7 of the segments, whose
    /// days are those asked ($1 to $2) already. $1 and $2 stay referenced so that every report
    /// takes the same parameters.
    static let quartersFilters = """
        WHERE $1::date <= $2::date
          AND q.quarters_from BETWEEN timestamptz '1970-01-01 00:00:00+00' + $6::int8 * interval '12 hours'
                                  AND timestamptz '1970-01-01 00:00:00+00' + $7::int8 * interval '12 hours'
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
        // A local day or hour is a slice of one or two half-day rows of running counts
        // (LocalSegments, docs/REPORTS.md "Time zones and hours"). The rows are read whole, a
        // few per key and half day, and sliced and summed here: in SQL each slice read two
        // elements of every measure's array, and that cost more than everything else.
        let localRowsSQL = """
            SELECT (extract(epoch FROM q.quarters_from)::int8 / 43200), \(dims.map { "q.\($0)" }.joined(separator: ", ")),
                   \(summed.map { "q.\($0.column)" }.joined(separator: ", "))
            FROM \(M.table.tableName(.quarters)) AS q
            \(quartersFilters)
            """
        let names = columns.map { column in
            switch column {
            case .sum(let m): m.name
            case .computed(let name, _): name
            }
        }
        let measures: @Sendable ([Int64]) -> [ReportValue] = { counts in
            let row = Sums(values: counts, position: position)
            return columns.map { column in
                switch column {
                case .sum(let m): .count(row[m])
                case .computed(_, let compute): compute(row)
                }
            }
        }
        return Spec(dimensions: ["day"] + dimensions, measureNames: names, sql: sql, localRowsSQL: localRowsSQL, measures: measures)
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

    /// A report's segments: for each half day (since the epoch) the slices of its rows that make
    /// a local day or hour, and the range of half days the rows come from.
    struct Segments: Sendable {
        struct Slice: Sendable {
            /// The day label, and the hour label when by hour.
            var labels: [String]
            /// First and past-last element of the running counts (0-based): the slice's count is
            /// `counts[end] - counts[start]`.
            var start: Int
            var end: Int
        }

        var slices: [Int64: [Slice]] = [:]
        var firstBlock: Int64 = 0
        var lastBlock: Int64 = -1

        /// The report's rows from the half-day rows `r` (`Spec.localRowsSQL`, binary: the half
        /// day, `dimensions` key columns, then one array of running counts per summed measure):
        /// each slice's counts summed by labels and key, rows whose counts are all zero left
        /// out, in bytewise order of labels and key.
        func sum(_ r: QueryResult, dimensions: Int) throws -> [(labels: [String], counts: [Int64])] {
            let measures = r.columnCount - 1 - dimensions
            var sums: [[String]: [Int64]] = [:]
            var strings = StringTable()
            var counts: [[Int64]] = Array(repeating: [], count: measures)
            for row in 0..<r.rowCount {
                guard let block = ByteReader.int64(r.bytes(row, 0)) else { throw Self.unreadable }
                guard let slices = slices[block] else { continue }
                let key = (1...dimensions).map { strings.string(r.bytes(row, $0)) }
                for m in 0..<measures {
                    guard ByteReader.int64Array(r.bytes(row, 1 + dimensions + m), into: &counts[m]) else { throw Self.unreadable }
                }
                for slice in slices {
                    var total = sums[slice.labels + key] ?? Array(repeating: 0, count: measures)
                    for m in 0..<measures {
                        let c = counts[m]
                        guard slice.end < c.count else { throw Self.unreadable }
                        total[m] += c[slice.end] - c[slice.start]
                    }
                    sums[slice.labels + key] = total
                }
            }
            return sums.filter { $0.value.contains { $0 != 0 } }
                .map { (labels: $0.key, counts: $0.value) }
                .sorted { a, b in a.labels.lexicographicallyPrecedes(b.labels) { $0.utf8.lexicographicallyPrecedes($1.utf8) } }
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
            var segments = Segments(firstBlock: .max, lastBlock: .min)
            for row in 0..<r.rowCount {
                guard let block = r.int64(row, 0), let day = r.string(row, 1), let start = r.int64(row, 3), let end = r.int64(row, 4) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "report: an unreadable segment")
                }
                let labels = byHour ? [day, r.string(row, 2) ?? ""] : [day]
                segments.slices[block, default: []].append(.init(labels: labels, start: Int(start) - 1, end: Int(end) - 1))
                (segments.firstBlock, segments.lastBlock) = (min(segments.firstBlock, block), max(segments.lastBlock, block))
            }
            if segments.slices.isEmpty { (segments.firstBlock, segments.lastBlock) = (0, -1) }
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

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
        var parameters: [String?] = [query.from.description, query.to.description, classes, query.adUnit, query.formatId]
        let sql: String
        var dimensions = spec.dimensions
        switch (query.isUTCDays, query.granularity) {
        case (true, _):
            sql = spec.sql
        case (false, .day):
            sql = spec.localDaySQL
            parameters.append(query.timeZone)
        case (false, .hour):
            sql = spec.localHourSQL
            parameters += [query.timeZone, query.isUTC ? "true" : "false"]
            dimensions.insert("hour", at: 1)
        }
        let columns = dimensions.count
        let needsQuarterHours = !query.isUTCDays
        let arguments = parameters
        let (rows, ivtRules): ([[ReportValue]], Int) = try await pool.withConnection { connection in
            let state = try connection.query(ReportSQL.projectionState)
            if needsQuarterHours, state.string(0, 0) != "t" {
                throw ReportError.quarterHoursMissing
            }
            let ivtRules = Int(state.int64(0, 1) ?? 0)
            let r = try connection.query(sql, arguments)
            var out: [[ReportValue]] = []
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
        /// Local days in zone $6, from the quarter-hour table.
        var localDaySQL: String
        /// Local hours in zone $6, from the quarter-hour table; $7 is true when the zone is UTC
        /// (hours are written with `Z`). The hour is the second column.
        var localHourSQL: String
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

    /// The quarter hours that can fall in local days $1..$2 of any zone (offsets lie within
    /// -12 and +14 hours, so one UTC day either side covers them), with the same row filters.
    /// The exact cut is by local day or hour, around it.
    static let quarterHourFilters = """
        WHERE quarter_hour >= ($1::date - 1)::timestamp AT TIME ZONE 'UTC'
          AND quarter_hour < ($2::date + 2)::timestamp AT TIME ZONE 'UTC'
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
        // A quarter hour lies in one local day and one local hour of every zone whose offset is
        // a whole number of quarter hours (docs/REPORTS.md, "Time zones").
        let localDaySQL = """
            SELECT to_char(local_day, 'YYYY-MM-DD'), \(dimensionList),
                   \(sums.joined(separator: ", "))
            FROM (SELECT (quarter_hour AT TIME ZONE $6::text)::date AS local_day, *
                  FROM \(M.table.tableName(.quarterHour))
                  \(quarterHourFilters)) AS q
            WHERE local_day BETWEEN $1::date AND $2::date
            GROUP BY local_day, \(dimensionList)
            HAVING \(having)
            ORDER BY local_day, \(order)
            """
        // An hour is the local clock's hour at the zone's offset then: the repeated hour of a
        // fall-back day is two rows, one per offset. Its label is HH:00 with that offset (where
        // an offset changes by half an hour, as on Lord Howe Island, the label names the clock
        // hour, not the instant the part began).
        let localHourSQL = """
            SELECT * FROM (
                SELECT to_char(local_hour, 'YYYY-MM-DD') AS local_day,
                       to_char(local_hour, 'YYYY-MM-DD"T"HH24:MI:SS')
                           || CASE WHEN $7::boolean THEN 'Z'
                                   ELSE CASE WHEN offset_seconds < 0 THEN '-' ELSE '+' END
                                        || to_char(abs(offset_seconds) / 3600, 'FM00') || ':'
                                        || to_char(abs(offset_seconds) % 3600 / 60, 'FM00') END AS local_hour_label,
                       \(dimensionList),
                       \(sums.joined(separator: ", "))
                FROM (SELECT date_trunc('hour', quarter_hour AT TIME ZONE $6::text) AS local_hour,
                             extract(epoch FROM (quarter_hour AT TIME ZONE $6::text) - (quarter_hour AT TIME ZONE 'UTC'))::int
                                 AS offset_seconds,
                             *
                      FROM \(M.table.tableName(.quarterHour))
                      \(quarterHourFilters)) AS q
                WHERE local_hour::date BETWEEN $1::date AND $2::date
                GROUP BY local_hour, offset_seconds, \(dimensionList)
                HAVING \(having)) AS r
            ORDER BY local_day, local_hour_label COLLATE "C", \(order)
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
        return Spec(dimensions: ["day"] + dimensions, measureNames: names, sql: sql, localDaySQL: localDaySQL,
                    localHourSQL: localHourSQL, measures: measures)
    }
}

import Metrics

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

    public func run(_ query: ReportQuery) async throws -> ReportResult {
        let started = ContinuousClock.now
        defer { durations[query.kind]?.recordNanoseconds((ContinuousClock.now - started).nanoseconds) }
        try await LogCursor(pool: pool).waitForProjections(maxWait: maxWait, stallLimit: stallLimit)
        let spec = ReportSQL.specs[query.kind]!
        let classes = "{" + TrafficClass.classes(includeTest: query.includeTest).map { String($0.rawValue) }.joined(separator: ",") + "}"
        let parameters: [String?] = [query.from.description, query.to.description, classes, query.adUnit, query.formatId]
        let rows: [[ReportValue]] = try await pool.withConnection { connection in
            let r = try connection.query(spec.sql, parameters)
            var out: [[ReportValue]] = []
            out.reserveCapacity(r.rowCount)
            for row in 0..<r.rowCount {
                var dims: [ReportValue] = (0..<spec.dimensions.count).map { .text(r.string(row, $0) ?? "") }
                let counts = (spec.dimensions.count..<r.columnCount).map { r.int64(row, $0) ?? 0 }
                dims.append(contentsOf: spec.measures(counts))
                out.append(dims)
            }
            return out
        }
        let lag = try await LogCursor(pool: pool).lag()
        return ReportResult(query: query, columns: spec.dimensions + spec.measureNames, rows: rows, lag: lag)
    }
}

enum ReportSQL {
    struct Spec: Sendable {
        var dimensions: [String]
        var measureNames: [String]
        var sql: String
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

    /// The report's dimension names (after `day`) and their columns.
    private static let dimensionColumns = ["adUnit": "ad_unit", "formatId": "format_id", "assetKey": "asset_key", "adapter": "adapter"]

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
        }
    }

    /// A report over `M`'s table: one row per day and `dimensions`, in that order (bytewise),
    /// leaving out rows whose summed measures are all zero.
    static func spec<M: ProjectionMeasure>(_ dimensions: [String], _ columns: [Column<M>]) -> Spec {
        let summed: [M] = columns.compactMap { if case .sum(let m) = $0 { m } else { nil } }
        let position = Dictionary(uniqueKeysWithValues: summed.enumerated().map { ($1, $0) })
        let dims = dimensions.map { dimensionColumns[$0]! }
        let sums = summed.map { "sum(\($0.column))" }
        let sql = """
            SELECT to_char(day, 'YYYY-MM-DD'), \(dims.joined(separator: ", ")),
                   \(sums.joined(separator: ", "))
            FROM \(M.table.tableName)
            \(filters)
            GROUP BY day, \(dims.joined(separator: ", "))
            HAVING \(sums.map { "\($0) <> 0" }.joined(separator: " OR "))
            ORDER BY day, \(dims.map { "\($0) COLLATE \"C\"" }.joined(separator: ", "))
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
        return Spec(dimensions: ["day"] + dimensions, measureNames: names, sql: sql, measures: measures)
    }
}

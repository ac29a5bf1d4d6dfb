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

    public init(pool: ConnectionPool, maxWait: Duration = .seconds(5), stallLimit: Duration = .seconds(1)) {
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
        try await waitForProjections()
        let spec = ReportSQL.spec(query.kind)
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
        let lag = try await Projector.lag(pool)
        return ReportResult(query: query, columns: spec.dimensions + spec.measureNames, rows: rows, lag: lag)
    }

    /// Waits until the projection checkpoint reaches the log's head as of now (see the type).
    func waitForProjections() async throws {
        guard maxWait > .zero, let head = try await pool.withConnection({ try Projector.head(on: $0) }) else { return }
        let start = ContinuousClock.now
        var checkpoint: String?
        var moved = start
        while true {
            let (reached, current, readable) = try await pool.withConnection { connection in
                let r = try connection.query(ProjectorSQL.reached, [head.tx, head.seq])
                return (r.bool(0, 0) ?? true, r.string(0, 1), r.bool(0, 2) ?? false)
            }
            if reached { return }
            let time = ContinuousClock.now
            if current != checkpoint || !readable { (checkpoint, moved) = (current, time) }
            if time - start >= maxWait || time - moved >= stallLimit { return }
            try await Task.sleep(for: .milliseconds(20))
        }
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

    static func ratio(_ a: Int64, _ b: Int64) -> ReportValue {
        .ratio(b == 0 ? 0 : Double(a) / Double(b))
    }

    static let filters = """
        WHERE day BETWEEN $1::date AND $2::date
          AND traffic_class = ANY($3::int2[])
          AND ($4::text IS NULL OR ad_unit = $4::text)
          AND ($5::text IS NULL OR format_id = $5::text)
        """

    static func spec(_ kind: ReportKind) -> Spec {
        switch kind {
        case .summary:
            Spec(
                dimensions: ["day", "adUnit", "formatId"],
                measureNames: ["impressions", "duplicateImpressions", "staleImpressions", "clicks", "duplicateClicks",
                               "attributedClicks", "unattributedClicks", "ctr", "adchoicesImpressions", "adchoicesClicks",
                               "videoPlays", "videoEnds"],
                sql: """
                    SELECT to_char(day, 'YYYY-MM-DD'), ad_unit, format_id,
                           sum(impressions), sum(duplicate_impressions), sum(stale_impressions), sum(clicks),
                           sum(duplicate_clicks), sum(attributed_clicks), sum(adchoices_impressions),
                           sum(adchoices_clicks), sum(video_plays), sum(video_ends)
                    FROM format_day
                    \(filters)
                    GROUP BY day, ad_unit, format_id
                    HAVING sum(impressions) <> 0 OR sum(duplicate_impressions) <> 0 OR sum(stale_impressions) <> 0
                        OR sum(clicks) <> 0 OR sum(duplicate_clicks) <> 0 OR sum(attributed_clicks) <> 0
                        OR sum(adchoices_impressions) <> 0 OR sum(adchoices_clicks) <> 0
                        OR sum(video_plays) <> 0 OR sum(video_ends) <> 0
                    ORDER BY day, ad_unit COLLATE "C", format_id COLLATE "C"
                    """,
                measures: { c in
                    let (impressions, clicks, attributed) = (c[0], c[3], c[5])
                    return [.count(impressions), .count(c[1]), .count(c[2]), .count(clicks), .count(c[4]),
                            .count(attributed), .count(clicks - attributed), ratio(attributed, impressions),
                            .count(c[6]), .count(c[7]), .count(c[8]), .count(c[9])]
                })
        case .assets:
            Spec(
                dimensions: ["day", "adUnit", "formatId", "assetKey"],
                measureNames: ["clicks", "duplicateClicks", "attributedClicks", "noImpression", "beforeImpression", "outsideWindow"],
                sql: """
                    SELECT to_char(day, 'YYYY-MM-DD'), ad_unit, format_id, asset_key,
                           sum(clicks), sum(duplicate_clicks), sum(attributed_clicks), sum(no_impression),
                           sum(before_impression), sum(outside_window)
                    FROM asset_day
                    \(filters)
                    GROUP BY day, ad_unit, format_id, asset_key
                    HAVING sum(clicks) <> 0 OR sum(duplicate_clicks) <> 0 OR sum(attributed_clicks) <> 0
                        OR sum(no_impression) <> 0 OR sum(before_impression) <> 0 OR sum(outside_window) <> 0
                    ORDER BY day, ad_unit COLLATE "C", format_id COLLATE "C", asset_key COLLATE "C"
                    """,
                measures: { c in c.map(ReportValue.count) })
        case .sources:
            Spec(
                dimensions: ["day", "adUnit", "adapter"],
                measureNames: ["appImpressions", "sdkImpressions", "mediationImpressions", "doubleTrackedImpressionAds", "doubleTrackedClickAds"],
                sql: """
                    SELECT to_char(day, 'YYYY-MM-DD'), ad_unit, adapter,
                           sum(app_impressions), sum(sdk_impressions), sum(mediation_impressions),
                           sum(double_tracked_impression_ads), sum(double_tracked_click_ads)
                    FROM source_day
                    \(filters)
                    GROUP BY day, ad_unit, adapter
                    HAVING sum(app_impressions) <> 0 OR sum(sdk_impressions) <> 0 OR sum(mediation_impressions) <> 0
                        OR sum(double_tracked_impression_ads) <> 0 OR sum(double_tracked_click_ads) <> 0
                    ORDER BY day, ad_unit COLLATE "C", adapter COLLATE "C"
                    """,
                measures: { c in c.map(ReportValue.count) })
        case .adchoices:
            Spec(
                dimensions: ["day", "adUnit", "formatId"],
                measureNames: ["eeaReservationImpressions", "withAdChoices", "share", "adchoicesClicks"],
                sql: """
                    SELECT to_char(day, 'YYYY-MM-DD'), ad_unit, format_id,
                           sum(eea_reservation_impressions), sum(with_adchoices), sum(adchoices_clicks)
                    FROM format_day
                    \(filters)
                    GROUP BY day, ad_unit, format_id
                    HAVING sum(eea_reservation_impressions) <> 0 OR sum(with_adchoices) <> 0 OR sum(adchoices_clicks) <> 0
                    ORDER BY day, ad_unit COLLATE "C", format_id COLLATE "C"
                    """,
                measures: { c in [.count(c[0]), .count(c[1]), ratio(c[1], c[0]), .count(c[2])] })
        }
    }
}

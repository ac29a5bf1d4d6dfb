/// Reads one ad's stored events and explains them (`GET /v1/ads/{requestId}`, `tracker explain`).
///
/// The events come from the log, where every stored field is (the log has no index on
/// `requestId`: the read scans the partitions from the ad's first day on, found through
/// `ad_state`). Events that retention already dropped from the log are still in `ad_state`
/// and still counted: they are listed without their device and server times. Like a report,
/// the audit first waits for the projections to include what was committed before it was asked.
public struct AdAudit: Sendable {
    private let pool: ConnectionPool
    private let reports: Reports

    public init(pool: ConnectionPool, maxWait: Duration = LogCursor.defaultReportWait) {
        self.pool = pool
        reports = Reports(pool: pool, maxWait: maxWait)
    }

    /// The ad's audit trail and the projection lag, or `nil` when no event of it is stored.
    public func explain(requestId: String, includeTest: Bool) async throws -> (explanation: AdExplanation, lag: ProjectionLag)? {
        try await reports.waitForProjections()
        let found: (logged: [LoggedEvent], window: Duration)? = try await pool.withConnection { connection in
            let state = try connection.query(AdAuditSQL.window)
            let window = state.int64(0, 0).map(Duration.microseconds) ?? AdContribution.defaultAttributionWindow
            var strings = StringTable(limit: 64)
            let packed = try connection.query(AdAuditSQL.adState, [.text(requestId)], binaryResults: true)
            var projected: [AdEvent] = []
            if packed.rowCount == 1 {
                guard let events = AdState.decode(packed.bytes(0, 0), strings: &strings) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "ad_state of \(requestId) does not follow the packed layout")
                }
                projected = events
            }
            guard let earliest = projected.map(\.correctedAt).min() else { return nil }
            // corrected_at <= received_at + 1 s (SPEC 3 refuses occurredAt more than 1 s after sentAt),
            // so no event of the ad was received before this: the earlier partitions are skipped.
            let since = earliest - .seconds(2)
            let rows = try connection.query(AdAuditSQL.logged, [requestId, since.postgresText])
            var logged: [LoggedEvent] = []
            var seen = Set<UUIDText>()
            for r in 0..<rows.rowCount {
                guard let idText = rows.string(r, 0), let id = UUIDText(idText),
                      let type = rows.string(r, 1).flatMap(EventType.init(rawValue:)),
                      let corrected = rows.int64(r, 2), let unit = rows.string(r, 3), let format = rows.string(r, 4),
                      let source = rows.string(r, 6).flatMap(EventSource.init(rawValue:)),
                      let eea = rows.bool(r, 8), let reservation = rows.bool(r, 9), let test = rows.bool(r, 10)
                else { throw DatabaseError(.unexpectedResult, serverMessage: "audit: unexpected log row \(r)") }
                let event = AdEvent(id: id, type: type, correctedAt: Timestamp(microseconds: corrected), adUnit: unit,
                                    formatId: format, assetKey: rows.string(r, 5), source: source, adapter: rows.string(r, 7),
                                    eea: eea, reservation: reservation, test: test)
                seen.insert(id)
                logged.append(LoggedEvent(event: event, testFlag: test,
                                          occurredAt: rows.int64(r, 11).map(Timestamp.init(microseconds:)),
                                          sentAt: rows.int64(r, 12).map(Timestamp.init(microseconds:)),
                                          receivedAt: rows.int64(r, 13).map(Timestamp.init(microseconds:))))
            }
            for event in projected where !seen.contains(event.id) {
                // Dropped from the log by retention; the packed state keeps no test flag of its own.
                logged.append(LoggedEvent(event: event, testFlag: event.isTest && !AdEvent.testAdUnits.contains(event.adUnit),
                                          occurredAt: nil, sentAt: nil, receivedAt: nil))
            }
            return (logged, window)
        }
        guard let found else { return nil }
        let explanation = AdContribution(attributionWindow: found.window)
            .explain(requestId: requestId, found.logged, includeTest: includeTest)
        return (explanation, try await LogCursor(pool: pool).lag())
    }
}

enum AdAuditSQL {
    static let window = "SELECT (extract(epoch FROM attribution_window) * 1000000)::bigint FROM projection_state"

    static let adState = "SELECT events FROM ad_state WHERE request_id = $1"

    /// Times as microseconds since 1970 (exact: `extract` gives a numeric).
    static let logged = """
        SELECT id::text, type::text, (extract(epoch FROM corrected_at) * 1000000)::bigint, ad_unit, format_id, asset_key,
               source::text, adapter, eea, reservation, test,
               (extract(epoch FROM occurred_at) * 1000000)::bigint, (extract(epoch FROM sent_at) * 1000000)::bigint,
               (extract(epoch FROM received_at) * 1000000)::bigint
        FROM events
        WHERE request_id = $1 AND received_at >= $2::timestamptz
        """
}

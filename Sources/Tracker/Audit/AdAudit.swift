/// Reads one ad's stored events and explains them (`GET /v1/ads/{requestId}`, `tracker explain`).
///
/// The events come from the log, where every stored field is (the log has no index on
/// `requestId`: the read scans the partitions from the ad's first day on, found through
/// `ad_state`). Events that retention already dropped from the log are still in `ad_state`
/// and still counted: they are listed without their device and server times. Like a report,
/// the audit first waits for the projections to include what was committed before it was asked.
public struct AdAudit: Sendable {
    private let pool: ConnectionPool
    private let maxWait: Duration

    public init(pool: ConnectionPool, maxWait: Duration = LogCursor.defaultReportWait) {
        self.pool = pool
        self.maxWait = maxWait
    }

    /// The ad's audit trail and the projection lag, or `nil` when no event of it is stored.
    public func explain(requestId: String, includeTest: Bool) async throws -> (explanation: AdExplanation, lag: ProjectionLag)? {
        try await LogCursor(pool: pool).waitForProjections(maxWait: maxWait, stallLimit: LogCursor.defaultStallLimit)
        let found = try await pool.withConnection { connection
            -> (logged: [LoggedEvent], rules: AdContribution, ruleSet: VersionedRuleSet, labelledBy: [PackedUUID: LabellingRule])? in
            let state = try connection.query(AdAuditSQL.window)
            let window = state.int64(0, 0).map(Duration.microseconds) ?? AdContribution.defaultAttributionWindow
            // The labels are the projections' (each event's client, judged under their rule set);
            // excessive clicks follow from the rule set's limit.
            let ruleSet = try IVTRuleSets.load(version: Int(state.int64(0, 1) ?? 0), on: connection)
            let rules = AdContribution(attributionWindow: window, maxClicksPerAd: ruleSet.ruleSet.maxClicksPerAd)
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
            // corrected_at <= received_at + 1 s (PROTOCOL.md 3 refuses occurredAt more than 1 s after sentAt),
            // so no event of the ad was received before this: the earlier partitions are skipped.
            let since = earliest - .seconds(2)
            let rows = try connection.query(AdAuditSQL.logged, [.text(requestId), .text(since.postgresText)], binaryResults: true)
            var logged: [LoggedEvent] = []
            var seen = Set<PackedUUID>()
            let labels = Dictionary(projected.map { ($0.id, $0.label) }, uniquingKeysWith: { a, _ in a })
            var clients: [PackedUUID: LabellingRule.Client] = [:]
            for r in 0..<rows.rowCount {
                let row: AdEventRow
                do throws(UnreadableColumn) { row = try AdEventRow(AdEventRow.values(of: rows, row: r)) } catch {
                    throw DatabaseError(.unexpectedResult, serverMessage: "audit: log row \(r) has an unreadable \(error.column.name)")
                }
                func time(_ column: Int) -> Timestamp? { Timestamp(timestamptz: rows.bytes(r, column)) }
                let id = PackedUUID(binary: row.id)
                let event = row.event(strings: &strings, label: labels[id] ?? nil)
                seen.insert(event.id)
                clients[event.id] = LabellingRule.Client(userAgent: row.userAgentId, address: row.clientAddress, channel: row.channel)
                logged.append(LoggedEvent(event: event, testFlag: row.testFlag, occurredAt: time(AdAuditSQL.occurredAt),
                                          sentAt: time(AdAuditSQL.sentAt), receivedAt: time(AdAuditSQL.receivedAt)))
            }
            for event in projected where !seen.contains(event.id) {
                // Dropped from the log by retention; the packed state keeps no test flag of its own.
                logged.append(LoggedEvent(event: event, testFlag: event.isTest && !AdEvent.testAdUnits.contains(event.adUnit),
                                          occurredAt: nil, sentAt: nil, receivedAt: nil))
            }
            let labelledBy = try LabellingRule.rules(behind: labels.compactMapValues { $0 }, clients: clients, under: ruleSet.ruleSet,
                                                     on: connection)
            return (logged, rules, ruleSet, labelledBy)
        }
        guard let found else { return nil }
        var explanation = found.rules.explain(requestId: requestId, found.logged, includeTest: includeTest)
        explanation.ivtRules = found.ruleSet.version
        // Named only beside a label the outcome shows (a test event left out shows none).
        for (i, e) in explanation.events.enumerated() {
            guard let label = e.outcome.label else { continue }
            explanation.events[i].labelledBy = label == .excessiveClicks
                ? found.ruleSet.ruleSet.maxClicksPerAd.map(LabellingRule.maxClicksPerAd) : found.labelledBy[e.event.id]
        }
        return (explanation, try await LogCursor(pool: pool).lag())
    }
}

enum AdAuditSQL {
    /// Columns: 0 attribution window (µs), 1 the projections' invalid-traffic rule set.
    static let window = "SELECT (extract(epoch FROM attribution_window) * 1000000)::bigint, ivt_rules FROM projection_state"

    static let adState = "SELECT events FROM ad_state WHERE request_id = $1"

    /// Binary columns: the `AdEventColumn`s, then the device's, the SDK's and the server's times.
    static let logged = """
        SELECT \(AdEventColumn.list), occurred_at, sent_at, received_at
        FROM events
        WHERE request_id = $1 AND received_at >= $2::timestamptz
        """
    static let occurredAt = AdEventColumn.allCases.count, sentAt = occurredAt + 1, receivedAt = occurredAt + 2
}

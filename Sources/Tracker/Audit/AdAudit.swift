/// Reads one ad's or one load's stored events and explains them (`GET /v1/ads/{requestId}`,
/// `GET /v1/loads/{loadId}`, `tracker explain`).
///
/// The events come from the log, where every stored field is (the log has no index on
/// `requestId`: the read scans the partitions from the state's first day on, found through
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

    /// The ad's audit trail, with the trails of the loads it names, and the projection lag, or
    /// `nil` when no event of it is stored. With `networks` (a scoped key: PROTOCOL.md 11), an ad
    /// or load with an event outside them is `nil` too, exactly as one that does not exist.
    public func explain(requestId: String, includeTest: Bool,
                        networks: NetworkScope? = nil) async throws -> (explanation: AdExplanation, lag: ProjectionLag)? {
        let caughtUp = try await LogCursor(pool: pool).waitForProjections(maxWait: maxWait, stallLimit: LogCursor.defaultStallLimit)
        let conninfo = pool.conninfo
        let found = try await pool.withConnection { connection in try connection.transaction(begin: AdAuditSQL.snapshot) {
            () -> (ad: Trail, loads: [(String, Trail)], rules: Rules)? in
            let rules = try Rules.read(on: connection, conninfo: conninfo)
            guard let ad = try Self.trail(of: requestId, .ad, rules: rules, networks: networks, on: connection) else { return nil }
            var loadIds: [String] = []
            for l in ad.logged where l.event.type == .adLoaded {
                if let load = l.loadId, !loadIds.contains(load) { loadIds.append(load) }
            }
            let loads = try loadIds.compactMap { id in
                try Self.trail(of: id, .load, rules: rules, networks: networks, on: connection).map { (id, $0) }
            }
            return (ad, loads, rules)
        } }
        guard let found else { return nil }
        var explanation = found.rules.contribution.explain(requestId: requestId, found.ad.logged, includeTest: includeTest)
        explanation.ivtRules = found.rules.ivtRules
        found.rules.name(&explanation.events, by: found.ad.labelledBy)
        explanation.loads = found.loads.map { id, trail in
            var load = found.rules.contribution.explain(loadId: id, trail.logged, includeTest: includeTest)
            load.ivtRules = found.rules.ivtRules
            found.rules.name(&load.events, by: trail.labelledBy)
            return load
        }
        return (explanation, try await lag(caughtUp, networks: networks))
    }

    /// The load's audit trail and the projection lag, or `nil` when no event of it is stored (or,
    /// with `networks`, an event of it is outside them).
    public func explain(loadId: String, includeTest: Bool,
                        networks: NetworkScope? = nil) async throws -> (explanation: LoadExplanation, lag: ProjectionLag)? {
        let caughtUp = try await LogCursor(pool: pool).waitForProjections(maxWait: maxWait, stallLimit: LogCursor.defaultStallLimit)
        let conninfo = pool.conninfo
        let found = try await pool.withConnection { connection in try connection.transaction(begin: AdAuditSQL.snapshot) {
            () -> (load: Trail, rules: Rules)? in
            let rules = try Rules.read(on: connection, conninfo: conninfo)
            return try Self.trail(of: loadId, .load, rules: rules, networks: networks, on: connection).map { ($0, rules) }
        } }
        guard let found else { return nil }
        var explanation = found.rules.contribution.explain(loadId: loadId, found.load.logged, includeTest: includeTest)
        explanation.ivtRules = found.rules.ivtRules
        found.rules.name(&explanation.events, by: found.load.labelledBy)
        return (explanation, try await lag(caughtUp, networks: networks))
    }

    /// The lag the wait found (caught up on Citus), else read now.
    private func lag(_ found: ProjectionLag?, networks: NetworkScope?) async throws -> ProjectionLag {
        if let found { return found }
        return try await LogCursor(pool: pool).lag(networks: networks)
    }

    /// The rules the projections were computed with: the attribution window, and the rule set
    /// whose labels the events carry (excessive clicks follow from its limit).
    struct Rules {
        var contribution: AdContribution
        var ruleSet: VersionedRuleSet
        var ivtRules: Int { ruleSet.version }
        /// Whether a key the projections do not hold yet is looked for among the log's
        /// unprojected events: on one node, where they follow the checkpoint in the log's order.
        var readsUnprojected: Bool

        static func read(on connection: Connection, conninfo: String) throws -> Rules {
            let state = try connection.query(AdAuditSQL.window)
            let window = state.int64(0, 0).map(Duration.microseconds) ?? AdContribution.defaultAttributionWindow
            let ruleSet = try IVTRuleSets.load(version: Int(state.int64(0, 1) ?? 0), on: connection)
            return Rules(contribution: AdContribution(attributionWindow: window, maxClicksPerAd: ruleSet.ruleSet.maxClicksPerAd),
                         ruleSet: ruleSet, readsUnprojected: try LogLayout.of(connection, conninfo: conninfo).citus == nil)
        }

        /// Names the rule behind each label the events' outcomes show (a test event left out shows none).
        func name(_ events: inout [ExplainedEvent], by labelledBy: [PackedUUID: LabellingRule]) {
            for (i, e) in events.enumerated() {
                guard let label = e.outcome.label else { continue }
                events[i].labelledBy = label == .excessiveClicks
                    ? ruleSet.ruleSet.maxClicksPerAd.map(LabellingRule.maxClicksPerAd) : labelledBy[e.event.id]
            }
        }
    }

    /// A state's events as the log stores them, and the rule behind each label they carry.
    struct Trail {
        var logged: [LoggedEvent]
        var labelledBy: [PackedUUID: LabellingRule]
    }

    /// Which part of a state a trail reads: an ad's events, or a load's (its own events and the
    /// `ad_loaded` events that name it).
    enum Part {
        case ad, load

        func holds(_ e: AdEvent) -> Bool { (self == .load) == e.isLoadPart }

        var logged: String { self == .ad ? AdAuditSQL.loggedOfAd : AdAuditSQL.loggedOfLoad }

        var unprojected: String { self == .ad ? AdAuditSQL.unprojectedOfAd : AdAuditSQL.unprojectedOfLoad }
    }

    /// The stored events of the ad or load `key` with the log's times, or `nil` when it has none,
    /// or (with `networks`) has one outside them: decided from `ad_state` alone, before the log
    /// is read, so that another network's state answers as fast as one that does not exist.
    private static func trail(of key: String, _ part: Part, rules: Rules, networks: NetworkScope?,
                              on connection: Connection) throws -> Trail? {
        var strings = StringTable(limit: 64)
        let packed = try connection.query(AdAuditSQL.adState, [.text(key)], binaryResults: true)
        var projected: [AdEvent] = []
        if packed.rowCount == 1 {
            guard let events = AdState.decode(packed.bytes(0, 0), strings: &strings) else {
                throw DatabaseError(.unexpectedResult, serverMessage: "ad_state of \(key) does not follow the packed layout")
            }
            projected = events.filter(part.holds)
        }
        if let networks, projected.contains(where: { !networks.contains(adUnit: $0.adUnit) }) { return nil }
        let rows: QueryResult
        if let earliest = projected.map(\.correctedAt).min() {
            // corrected_at <= received_at + 1 s (PROTOCOL.md 3 refuses occurredAt more than 1 s after sentAt),
            // so no event of the state was received before this: the earlier partitions are skipped.
            let since = earliest - .seconds(2)
            rows = try connection.query(part.logged, [.text(key), .text(since.postgresText)], binaryResults: true)
        } else if rules.readsUnprojected {
            // Committed but not projected yet (a projector just started, or behind by more than
            // the audit waited): the trail is still the log's, found among the events after the
            // checkpoint, at most `AdAuditSQL.unprojectedLimit` of them.
            rows = try connection.query(part.unprojected, [.text(key)], binaryResults: true)
            guard rows.rowCount > 0 else { return nil }
        } else {
            return nil
        }
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
            var event = row.event(strings: &strings, label: labels[id] ?? nil)
            if let networks, !networks.contains(adUnit: event.adUnit) { return nil }
            if part == .load, event.type == .adLoaded { event = event.loadReference }
            seen.insert(event.id)
            clients[event.id] = LabellingRule.Client(userAgent: row.userAgentId, address: row.clientAddress, channel: row.channel)
            logged.append(LoggedEvent(event: event, testFlag: row.testFlag, occurredAt: time(AdAuditSQL.occurredAt),
                                      sentAt: time(AdAuditSQL.sentAt), receivedAt: time(AdAuditSQL.receivedAt),
                                      requestId: row.type.isLoadEvent ? nil : row.requestIdString,
                                      loadId: row.loadId.map { String(decoding: $0, as: UTF8.self) }))
        }
        for event in projected where !seen.contains(event.id) {
            // Dropped from the log by retention; the packed state keeps no test flag of its own.
            logged.append(LoggedEvent(event: event, testFlag: event.isTest && !AdEvent.testAdUnits.contains(event.adUnit),
                                      occurredAt: nil, sentAt: nil, receivedAt: nil,
                                      requestId: part == .ad ? key : nil, loadId: part == .load ? key : nil))
        }
        let labelledBy = try LabellingRule.rules(behind: labels.compactMapValues { $0 }, clients: clients, under: rules.ruleSet.ruleSet,
                                                 on: connection)
        return Trail(logged: logged, labelledBy: labelledBy)
    }
}

enum AdAuditSQL {
    /// One snapshot for every read of a trail: `ad_state`, the checkpoint and the log agree, so
    /// an event the projector commits between two reads is found in one of them, never missed by both.
    static let snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

    /// Columns: 0 attribution window (µs), 1 the projections' invalid-traffic rule set.
    static let window = "SELECT (extract(epoch FROM attribution_window) * 1000000)::bigint, ivt_rules FROM projection_state"

    static let adState = "SELECT events FROM ad_state WHERE request_id = $1"

    /// Binary columns: the `AdEventColumn`s, then the device's, the SDK's and the server's times.
    /// An ad's events are stored under its request id; a load's under its id, where an ad may
    /// have the same key, so each read takes its own types.
    static let loggedOfAd = """
        SELECT \(AdEventColumn.list), occurred_at, sent_at, received_at
        FROM events
        WHERE request_id = $1 AND received_at >= $2::timestamptz
          AND type NOT IN ('ad_request', 'ad_failed', 'mediation_result')
        """

    /// A load's events, and the `ad_loaded` events that name it.
    static let loggedOfLoad = """
        SELECT \(AdEventColumn.list), occurred_at, sent_at, received_at
        FROM events
        WHERE received_at >= $2::timestamptz
          AND ((request_id = $1 AND type IN ('ad_request', 'ad_failed', 'mediation_result'))
               OR (load_id = $1 AND type = 'ad_loaded'))
        """
    /// The unprojected events the audit looks through for a key the projections do not hold:
    /// a bound on what one request for an unknown key reads while the projector is behind.
    static let unprojectedLimit = 100_000

    /// The first `unprojectedLimit` events after the checkpoint, in the log's order (the
    /// `(tx, seq)` index), as `loggedOfAd` and `loggedOfLoad` take them.
    private static func unprojected(where condition: String) -> String {
        """
        SELECT \(AdEventColumn.list), occurred_at, sent_at, received_at
        FROM (
            SELECT * FROM events
            WHERE (tx, seq) > ((SELECT checkpoint_tx FROM projection_state), (SELECT checkpoint_seq FROM projection_state))
            ORDER BY tx, seq
            LIMIT \(unprojectedLimit)
        ) events
        WHERE \(condition)
        """
    }

    static let unprojectedOfAd = unprojected(where: "request_id = $1 AND type NOT IN ('ad_request', 'ad_failed', 'mediation_result')")
    static let unprojectedOfLoad = unprojected(where: """
        (request_id = $1 AND type IN ('ad_request', 'ad_failed', 'mediation_result')) OR (load_id = $1 AND type = 'ad_loaded')
        """)

    static let occurredAt = AdEventColumn.allCases.count, sentAt = occurredAt + 1, receivedAt = occurredAt + 2
}

import Logging
import ServiceLifecycle

/// How far the projections trail the log.
public struct ProjectionLag: Sendable, Hashable {
    /// Log events not yet projected (capped at `cap` to keep the count cheap).
    public var events: Int
    /// Seconds since the oldest unprojected event was received; 0 when caught up.
    public var seconds: Double
    public static let cap = 100_000
}

/// Maintains the projection tables from the log, exactly once.
///
/// Each step reads the next events in log order, recomputes the contribution of every ad
/// they touch, and commits the changed rows together with the new checkpoint in one
/// transaction: a crash loses the step entirely or not at all. A transaction-level
/// advisory lock makes two projectors on one database take turns rather than collide.
public final class Projector: Service, Sendable {
    public let batchSize: Int
    public let pollInterval: Duration
    private let pool: ConnectionPool
    private let attributionWindow: Duration
    private let logger: Logger

    public init(pool: ConnectionPool, attributionWindow: Duration = .seconds(3600), batchSize: Int = 20_000,
                pollInterval: Duration = .milliseconds(100), logger: Logger) {
        self.pool = pool
        self.attributionWindow = attributionWindow
        self.batchSize = batchSize
        self.pollInterval = pollInterval
        self.logger = logger
    }

    /// Projects until graceful shutdown; a failed step is retried after a pause.
    public func run() async throws {
        try await checkWindow()
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let projected = try await self.step()
                    if projected < self.batchSize {
                        try? await Task.sleep(for: self.pollInterval)
                    }
                } catch {
                    self.logger.warning("projection step failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                    try? await Task.sleep(for: .seconds(1))
                }
            }
        }
    }

    /// Refuses to mix two attribution windows in one set of projections.
    func checkWindow() async throws {
        let window = attributionWindow
        _ = try await pool.withConnection { c in
            try c.transaction { try Self.lockState(on: c, window: window) }
        }
    }

    /// Projects the next events of the log; returns how many log events it consumed.
    @discardableResult
    public func step() async throws -> Int {
        let window = attributionWindow
        let limit = batchSize
        return try await pool.withConnection { connection in
            try connection.transaction {
                try Self.step(on: connection, window: window, limit: limit)
            }
        }
    }

    /// Projects until every event committed before the call is projected; returns the events consumed.
    ///
    /// An event becomes readable only once every older transaction in the cluster has ended
    /// (see `ProjectorSQL.nextEvents`), so this may wait for a transaction that is still open.
    @discardableResult
    public func catchUp() async throws -> Int {
        try await checkWindow()
        let (window, limit, pause) = (attributionWindow, batchSize, pollInterval)
        return try await pool.withConnection { c in
            try Self.catchUp(on: c, to: try Self.head(on: c), window: window, limit: limit, pause: pause)
        }
    }

    /// The log's newest committed event, or `nil` for an empty log.
    static func head(on connection: Connection) throws -> LogPosition? {
        let r = try connection.query(ProjectorSQL.head)
        guard r.rowCount == 1, let tx = r.string(0, 0), let seq = r.string(0, 1) else { return nil }
        return LogPosition(tx: tx, seq: seq)
    }

    /// Steps on `connection`, one transaction per step, until the checkpoint reaches `head`.
    ///
    /// `searchPath` points the steps at other projection tables (a rebuild's fresh schema).
    static func catchUp(on connection: Connection, to head: LogPosition?, window: Duration, limit: Int,
                        pause: Duration, searchPath: String? = nil) throws -> Int {
        func inTransaction<T>(_ body: () throws -> T) throws -> T {
            try connection.transaction {
                if let searchPath { try connection.execute("SET LOCAL search_path = \(searchPath)") }
                return try body()
            }
        }
        var total = 0
        while true {
            let n = try inTransaction { try step(on: connection, window: window, limit: limit) }
            total += n
            if n == limit { continue }
            guard let head else { return total }
            let reached = try inTransaction {
                try connection.query(ProjectorSQL.reached, [head.tx, head.seq]).bool(0, 0) ?? false
            }
            if reached { return total }
            // Nothing readable yet: an older transaction elsewhere is still open.
            if n == 0 { try connection.query("SELECT pg_sleep($1::float8)", [String(Double(pause.microseconds) / 1e6)]) }
        }
    }

    static func step(on connection: Connection, window: Duration, limit: Int) throws -> Int {
        // Projections can be rebuilt from the log and the checkpoint commits with them,
        // so a lost commit is only work to redo: no need to wait for the WAL flush.
        try connection.execute("SET LOCAL synchronous_commit = off")
        try connection.query("SELECT pg_advisory_xact_lock(hashtext('tracker.projector'))")
        let (tx, seq) = try lockState(on: connection, window: window)
        let rows = try connection.query(ProjectorSQL.nextEvents, [tx, String(seq), String(limit)])
        guard rows.rowCount > 0 else { return 0 }

        var newEvents: [String: [AdEvent]] = [:]
        for r in 0..<rows.rowCount {
            guard let event = ProjectorSQL.adEvent(rows, r), let requestId = rows.string(r, 0) else { continue }
            if AdEvent.isProjected(event.type) { newEvents[requestId, default: []].append(event) }
        }
        let last = rows.rowCount - 1
        let lastTx = rows.string(last, 12) ?? tx
        let lastSeq = rows.int64(last, 13) ?? seq

        if !newEvents.isEmpty {
            let existing = try loadAdEvents(Array(newEvents.keys), on: connection)
            // An id the ad already has is a retry the log stored again because retention had
            // forgotten its id with its partition (`ad_events` is kept): it changes nothing.
            for (requestId, added) in newEvents {
                guard let before = existing[requestId] else { continue }
                let known = Set(before.lazy.map(\.id))
                let fresh = added.filter { !known.contains($0.id) }
                newEvents[requestId] = fresh.isEmpty ? nil : fresh
            }
            let rules = AdContribution(attributionWindow: window)
            var delta = Contribution()
            for (requestId, added) in newEvents {
                let before = existing[requestId] ?? []
                if !before.isEmpty { delta.subtract(rules.contribution(of: before)) }
                delta.add(rules.contribution(of: before + added))
            }
            delta.removeZeros()
            try insertAdEvents(newEvents, on: connection)
            try ProjectionWriter.apply(delta, on: connection)
        }
        try connection.query(
            "UPDATE projection_state SET checkpoint_tx = $1::xid8, checkpoint_seq = $2::bigint, events_projected = events_projected + $3::bigint, updated_at = now()",
            [lastTx, String(lastSeq), String(rows.rowCount)])
        return rows.rowCount
    }

    /// Locks the state row and returns the checkpoint, after making sure the projections were
    /// computed with `window` (set it when nothing is projected yet, refuse otherwise).
    static func lockState(on connection: Connection, window: Duration) throws -> (tx: String, seq: Int64) {
        let state = try connection.query(ProjectorSQL.state)
        guard state.rowCount == 1, let tx = state.string(0, 0), let seq = state.int64(0, 1),
              let storedWindow = state.int64(0, 2), let projected = state.int64(0, 3) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "projection_state must hold one row")
        }
        if storedWindow != window.microseconds {
            guard projected == 0 else {
                throw ProjectorError.windowMismatch(projected: .microseconds(storedWindow), configured: window)
            }
            try connection.query(ProjectorSQL.setWindow, [String(window.microseconds)])
        }
        return (tx, seq)
    }

    static func loadAdEvents(_ requestIds: [String], on connection: Connection) throws -> [String: [AdEvent]] {
        var ids = BinaryArray(.text, capacity: requestIds.count)
        for id in requestIds { ids.append(id) }
        let rows = try connection.query(ProjectorSQL.adEventsOfAds, [ids.parameter])
        var out: [String: [AdEvent]] = [:]
        for r in 0..<rows.rowCount {
            guard let requestId = rows.string(r, 0), let event = ProjectorSQL.adEvent(rows, r) else { continue }
            out[requestId, default: []].append(event)
        }
        return out
    }

    static func insertAdEvents(_ events: [String: [AdEvent]], on connection: Connection) throws {
        let count = events.values.reduce(0) { $0 + $1.count }
        var requestId = BinaryArray(.text, capacity: count)
        var id = BinaryArray(.uuid, capacity: count)
        var type = BinaryArray(.text, capacity: count)
        var correctedAt = BinaryArray(.timestamptz, capacity: count)
        var adUnit = BinaryArray(.text, capacity: count)
        var formatId = BinaryArray(.text, capacity: count)
        var assetKey = BinaryArray(.text, capacity: count)
        var source = BinaryArray(.text, capacity: count)
        var adapter = BinaryArray(.text, capacity: count)
        var eea = BinaryArray(.bool, capacity: count)
        var reservation = BinaryArray(.bool, capacity: count)
        var isTest = BinaryArray(.bool, capacity: count)
        for (ad, list) in events {
            for e in list {
                requestId.append(ad)
                id.append(e.id)
                type.append(e.type.rawValue)
                correctedAt.append(e.correctedAt)
                adUnit.append(e.adUnit)
                formatId.append(e.formatId)
                assetKey.append(e.assetKey)
                source.append(e.source.rawValue)
                adapter.append(e.adapter)
                eea.append(e.eea)
                reservation.append(e.reservation)
                isTest.append(e.isTest)
            }
        }
        try connection.query(ProjectorSQL.insertAdEvents, [requestId, id, type, correctedAt, adUnit, formatId, assetKey,
                                                          source, adapter, eea, reservation, isTest].map(\.parameter))
    }

    /// Events and seconds the projections trail the log.
    public func lag() async throws -> ProjectionLag {
        try await Self.lag(pool)
    }

    public static func lag(_ pool: ConnectionPool) async throws -> ProjectionLag {
        try await pool.withConnection { connection in
            let r = try connection.query(ProjectorSQL.lag, [String(ProjectionLag.cap)])
            return ProjectionLag(events: Int(r.int64(0, 0) ?? 0), seconds: Double(r.string(0, 1) ?? "0") ?? 0)
        }
    }
}

/// A place in the log's order `(tx, seq)`, as text for statement parameters.
struct LogPosition: Sendable {
    var tx: String
    var seq: String
}

public enum ProjectorError: Error, Sendable, CustomStringConvertible {
    case windowMismatch(projected: Duration, configured: Duration)
    /// Another `tracker rebuild` holds the rebuild lock on this database.
    case rebuildRunning
    /// Retention dropped these days of the log, so a rebuild would empty their report rows.
    case logTruncated(days: Int, first: String, last: String)

    public var description: String {
        switch self {
        case .logTruncated(let days, let first, let last):
            "retention dropped \(days) day(s) of the log (\(first) to \(last)); a rebuild replays only the kept log and would empty their report rows. Pass --discard-dropped-days to rebuild anyway"
        case .rebuildRunning:
            "another 'tracker rebuild' is running on this database; wait for it to finish"
        case .windowMismatch(let projected, let configured):
            "the projections were computed with an attribution window of \(projected.microseconds / 1_000_000) s but the tracker is configured with \(configured.microseconds / 1_000_000) s: run 'tracker rebuild' to recompute them"
        }
    }
}

enum ProjectorSQL {
    /// Columns: 0 request_id, 1 id, 2 type, 3 corrected_at (µs), 4 ad_unit, 5 format_id, 6 asset_key,
    /// 7 source, 8 adapter, 9 eea, 10 reservation, 11 test, 12 tx, 13 seq.
    static let nextEvents = """
        SELECT request_id, id::text, type::text, (extract(epoch FROM corrected_at) * 1000000)::bigint,
               ad_unit, format_id, asset_key, source::text, adapter, eea, reservation, test, tx::text, seq
        FROM events
        WHERE (tx, seq) > ($1::xid8, $2::bigint)
          AND tx < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY events.tx, events.seq  -- the table's xid8, not the text column of the same name
        LIMIT $3::int
        """

    /// Columns: 0 checkpoint tx, 1 checkpoint seq, 2 attribution window (µs), 3 events projected.
    static let state = """
        SELECT checkpoint_tx::text, checkpoint_seq, (extract(epoch FROM attribution_window) * 1000000)::bigint,
               events_projected
        FROM projection_state FOR UPDATE
        """

    static let setWindow = "UPDATE projection_state SET attribution_window = make_interval(secs => $1::bigint / 1000000.0)"

    /// The newest committed event: where `catchUp` stops.
    /// (`events.tx`: a bare `tx` would sort by the output column, the text, where '1000' < '999'.)
    static let head = "SELECT tx::text, seq FROM events ORDER BY events.tx DESC, events.seq DESC LIMIT 1"

    /// Whether the checkpoint reached `($1, $2)`; the checkpoint (to see it move); whether
    /// events beyond it are readable now (else the projector waits for an older transaction).
    static let reached = """
        SELECT (s.checkpoint_tx, s.checkpoint_seq) >= ($1::xid8, $2::bigint), s.checkpoint_tx::text || '/' || s.checkpoint_seq,
               EXISTS (SELECT 1 FROM events e WHERE (e.tx, e.seq) > (s.checkpoint_tx, s.checkpoint_seq)
                                               AND e.tx < pg_snapshot_xmin(pg_current_snapshot()))
        FROM projection_state s
        """

    static let adEventsOfAds = """
        SELECT request_id, id::text, type::text, (extract(epoch FROM corrected_at) * 1000000)::bigint,
               ad_unit, format_id, asset_key, source::text, adapter, eea, reservation, is_test
        FROM ad_events
        WHERE request_id = ANY($1::text[])
        """

    static let insertAdEvents = """
        INSERT INTO ad_events (request_id, id, type, corrected_at, ad_unit, format_id, asset_key, source,
                               adapter, eea, reservation, is_test)
        SELECT r, i, t::event_type, c, u, f, a, s::event_source, d, e, v, x
        FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],
                    $8::text[], $9::text[], $10::bool[], $11::bool[], $12::bool[])
            AS n(r, i, t, c, u, f, a, s, d, e, v, x)
        """

    /// The checkpoint goes in as scalar subqueries, which the planner turns into parameters
    /// of an index condition on (tx, seq); joined in as a row it scanned the whole log.
    static let lag = """
        SELECT count(*), COALESCE(extract(epoch FROM now() - min(received_at)), 0)::float8::text
        FROM (
            SELECT received_at FROM events
            WHERE (tx, seq) > ((SELECT checkpoint_tx FROM projection_state), (SELECT checkpoint_seq FROM projection_state))
            ORDER BY tx, seq
            LIMIT $1::int
        ) pending
        """

    /// Reads an event from a row laid out as `nextEvents` / `adEventsOfAds` (columns 1...11).
    static func adEvent(_ rows: QueryResult, _ r: Int) -> AdEvent? {
        guard let idText = rows.string(r, 1), let id = UUIDText(idText),
              let type = rows.string(r, 2).flatMap(EventType.init(rawValue:)),
              let micros = rows.int64(r, 3),
              let adUnit = rows.string(r, 4), let formatId = rows.string(r, 5),
              let source = rows.string(r, 7).flatMap(EventSource.init(rawValue:))
        else { return nil }
        return AdEvent(id: id, type: type, correctedAt: Timestamp(microseconds: micros), adUnit: adUnit,
                       formatId: formatId, assetKey: rows.string(r, 6), source: source, adapter: rows.string(r, 8),
                       eea: rows.bool(r, 9) ?? false, reservation: rows.bool(r, 10) ?? false, test: rows.bool(r, 11) ?? false)
    }
}

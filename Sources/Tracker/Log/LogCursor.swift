/// How far the projections trail the log.
public struct ProjectionLag: Sendable, Hashable {
    /// Log events not yet projected: counted up to `cap`, estimated beyond it from the log's
    /// sequence (a count of 100 000 rows cost 70-300 ms on every `/readyz` and report).
    public var events: Int
    /// Seconds since the oldest unprojected event was received (of the first `cap` in log
    /// order); 0 when caught up.
    public var seconds: Double
    public static let cap = 1_000

    package init(events: Int, seconds: Double) {
        self.events = events
        self.seconds = seconds
    }
}

/// A place in the log's order `(tx, seq)`, as text for statement parameters.
struct LogPosition: Sendable, Hashable {
    var tx: String
    var seq: String

    /// The position as numbers, to compare two of them (`nil` if either is not one).
    var order: (tx: UInt64, seq: Int64)? {
        guard let tx = UInt64(tx), let seq = Int64(seq) else { return nil }
        return (tx, seq)
    }

    /// Whether this position is at or past `other`.
    func reaches(_ other: LogPosition) -> Bool {
        guard let a = order, let b = other.order else { return false }
        return a >= b
    }
}

/// Where the log ends: one position, or one per shard of a distributed log.
enum LogHead: Sendable {
    case single(LogPosition)
    case shards([Int64: LogPosition])
}

/// How far the projections got toward a head: whether they reached it, the checkpoint (to see
/// it move), and whether events past it are readable now with no projector running: only
/// then does a wait count toward its stall limit (else the projector waits for an older
/// transaction, or will project them, however slowly a loaded machine lets it).
struct LogProgress {
    var reached: Bool
    var checkpoint: String?
    var readable: Bool
    /// The highest sequence number in the groups' inbox when the log's cursors were first found
    /// at the head: what was owed for the events up to the head is at or below it.
    var inboxMark: Int64? = nil
}

/// The projections' place in the log, read one way by all who need it: the projector and
/// `tracker rebuild` (where the log's head is), reports and ad audits (read your writes),
/// `/readyz` and `/metrics` (the lag).
public struct LogCursor: Sendable {
    /// How long a report waits by default for the projections to hold what was committed
    /// when it was asked (`TRACKER_REPORT_WAIT`).
    public static let defaultReportWait = Duration.seconds(5)
    /// How long the checkpoint may stand still, with events ready, before a reader stops
    /// waiting for it (no projector runs).
    public static let defaultStallLimit = Duration.seconds(1)

    private let pool: ConnectionPool

    public init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// The log's newest committed event (of each shard), or `nil` for an empty log.
    static func head(on connection: Connection, layout: LogLayout) throws -> LogHead? {
        switch layout {
        case .singleNode, .coordinator:
            let r = try connection.query(SQL.head, [])
            guard r.rowCount == 1, let tx = r.string(0, 0), let seq = r.string(0, 1) else { return nil }
            return .single(LogPosition(tx: tx, seq: seq))
        case .citus(let log):
            let heads = try log.reading(on: connection) { try log.heads($0) }
            return heads.isEmpty ? nil : .shards(heads)
        }
    }

    /// How far the projections are toward `head` (read in the caller's transaction, if any).
    ///
    /// On a distributed log the projections reach the head once every cursor does and then
    /// the groups' inbox holds nothing it held at that moment (`inboxMark`, the previous
    /// progress's): what a group's step owed another group for the events up to the head was
    /// written with its checkpoints. `waitsForInbox` false: the cursors alone (a projector's
    /// catch-up, whose steps fold its inbox).
    static func progress(on connection: Connection, layout: LogLayout, toward head: LogHead, inboxMark: Int64? = nil,
                         waitsForInbox: Bool = true) throws -> LogProgress {
        switch (layout, head) {
        case (.citus(let log), .shards(let heads)):
            let (behind, backlog, inbox) = try log.reading(on: connection) { shards -> ([LogShard], [Int64: ShardBacklog], ClosedRange<Int64>?) in
                let behind = shards.all.filter { shard in heads[shard.cursor].map { !shard.checkpoint.reaches($0) } ?? false }
                if behind.isEmpty { return ([], [:], shards.inboxSeqs) }
                // Every shard is asked (one statement text per worker, prepared once), the answer
                // read for the shards behind.
                return (behind, try log.backlog(shards, cap: 1), shards.inboxSeqs)
            }
            let projectorRuns = { try connection.query(SQL.projectorRunning, [.text(ProjectorSQL.lock), .text(ProjectorSQL.running)]).bool(0, 0) ?? false }
            if behind.isEmpty {
                guard waitsForInbox, let inbox else { return LogProgress(reached: true, checkpoint: nil, readable: false) }
                let mark = inboxMark ?? inbox.upperBound
                if inbox.lowerBound > mark { return LogProgress(reached: true, checkpoint: nil, readable: false) }
                return LogProgress(reached: false, checkpoint: "inbox:\(inbox.lowerBound)", readable: !(try projectorRuns()), inboxMark: mark)
            }
            let runs = try projectorRuns()
            return LogProgress(reached: false, checkpoint: behind.map { "\($0.cursor):\($0.checkpoint.tx)/\($0.checkpoint.seq)" }.joined(separator: ","),
                               readable: !runs && behind.contains { backlog[$0.cursor]?.readable ?? false })
        case (_, .single(let position)):
            let r = try connection.query(SQL.reached, [.text(position.tx), .text(position.seq), .text(ProjectorSQL.lock), .text(ProjectorSQL.running)])
            return LogProgress(reached: r.bool(0, 0) ?? true, checkpoint: r.string(0, 1), readable: r.bool(0, 2) ?? false)
        case (.singleNode, .shards), (.coordinator, .shards):
            return LogProgress(reached: true, checkpoint: nil, readable: false)
        }
    }

    /// Events and seconds the projections trail the log; with `networks`, those of the
    /// networks' ad units only (a scoped key's view: PROTOCOL.md 11).
    public func lag(networks: NetworkScope? = nil) async throws -> ProjectionLag {
        let conninfo = pool.conninfo
        return try await pool.withConnection { try Self.lag(on: $0, conninfo: conninfo, networks: networks) }
    }

    /// `lag()` on a connection the caller already holds (a report reads it beside its rows).
    ///
    /// With `networks`, the events of those networks among the first `ProjectionLag.cap`
    /// unprojected ones (of each shard on Citus), and the age of the oldest of them: a scoped key
    /// learns nothing of other networks' traffic, not even from the estimate past the cap.
    static func lag(on connection: Connection, conninfo: String, networks: NetworkScope? = nil) throws -> ProjectionLag {
        switch try LogLayout.of(connection, conninfo: conninfo) {
        case .singleNode, .coordinator:
            if let networks {
                let r = try connection.query(SQL.lagOfNetworks, [networks.arrayParameter])
                return ProjectionLag(events: Int(r.int64(0, 0) ?? 0), seconds: Double(r.string(0, 1) ?? "0") ?? 0)
            }
            let r = try connection.query(SQL.lag, [])
            let counted = Int(r.int64(0, 0) ?? 0)
            let estimated = Int(r.int64(0, 2) ?? 0)
            return ProjectionLag(events: counted < ProjectionLag.cap ? counted : max(counted, estimated),
                                 seconds: Double(r.string(0, 1) ?? "0") ?? 0)
        case .citus(let log):
            // Counted up to the cap on each shard: never 0 while an event waits anywhere.
            // The groups' inbox counts too: with `networks`, the load references of those networks.
            let (backlog, inbox) = try log.reading(on: connection) { shards -> ([ShardBacklog], Int) in
                let backlog = Array(try log.backlog(shards, cap: ProjectionLag.cap, networks: networks).values)
                guard let networks, shards.inboxEntries > 0 else { return (backlog, shards.inboxEntries) }
                return (backlog, Int(try connection.query(InboxSQL.referencesOfNetworks, [networks.arrayParameter]).int64(0, 0) ?? 0))
            }
            return ProjectionLag(events: backlog.reduce(0) { $0 + $1.events } + inbox,
                                 seconds: backlog.compactMap(\.seconds).max() ?? 0)
        }
    }

    /// Whether no event waits behind any cursor of a distributed log, read after the caller was
    /// asked: the appends' marks on the coordinator, else one pass over the workers (the first
    /// row past each checkpoint). Then every event committed before it is projected (no row can
    /// appear below a checkpoint later: the projector moves one only below the horizon), and
    /// the lag is 0 for every scope.
    private static func caughtUp(_ log: CitusLog, on connection: Connection) throws -> Bool {
        if try CitusLog.caughtUpByMarks(on: connection) { return true }
        return try log.reading(on: connection) { shards in
            guard shards.inboxEntries == 0 else { return false }
            return try log.backlog(shards, cap: 1).values.allSatisfy { $0.events == 0 }
        }
    }

    /// Waits (at most `maxWait`) until the projections hold every event committed when it was
    /// called. It stops early when events are ready, no projector runs (none holds its step
    /// lock or the lock a running projector holds for its life) and the checkpoint has not
    /// moved for `stallLimit`; while a projector runs, or waits for a transaction open
    /// elsewhere (the log's ordering rule), it waits up to `maxWait`.
    ///
    /// - Parameter lookForCaughtUp: whether the first look on a distributed log asks whether
    ///   any acknowledged event waits at all (`caughtUp`: the appends' marks, else the workers;
    ///   `false` when the caller has just asked and found one: the heads and the checkpoints are
    ///   what tells when it is projected).
    /// - Returns: the lag (0) when the first look at a distributed log found every acknowledged
    ///   event projected, so that the caller need not ask every worker again; `nil` otherwise (and
    ///   on a single node, where the lag costs one statement): the caller reads the lag itself.
    @discardableResult
    func waitForProjections(maxWait: Duration, stallLimit: Duration, lookForCaughtUp: Bool = true) async throws -> ProjectionLag? {
        guard maxWait > .zero else { return nil }
        let conninfo = pool.conninfo
        let start = ContinuousClock.now
        // The first look shares one connection: caught up is the common case, and then the wait
        // costs one lend of a connection (and on Citus, when caught up, one statement on the
        // coordinator or one pass over the workers, not a pass for the heads and another for the
        // checkpoints).
        let found = try await pool.withConnection { c -> FirstLook in
            let layout = try LogLayout.of(c, conninfo: conninfo)
            if lookForCaughtUp, case .citus(let log) = layout, try Self.caughtUp(log, on: c) { return .caughtUp }
            guard let head = try Self.head(on: c, layout: layout) else { return .empty }
            return .behind(layout, head, try Self.progress(on: c, layout: layout, toward: head))
        }
        let (layout, head, first): (LogLayout, LogHead, LogProgress)
        switch found {
        case .caughtUp: return ProjectionLag(events: 0, seconds: 0)
        case .empty: return nil
        case .behind(let l, let h, let p): (layout, head, first) = (l, h, p)
        }
        guard !first.reached, ContinuousClock.now - start < maxWait else { return nil }
        var checkpoint = first.checkpoint
        var moved = start
        var inboxMark = first.inboxMark
        while true {
            try await Task.sleep(for: .milliseconds(20))
            let progress = try await pool.withConnection { [inboxMark] in
                try Self.progress(on: $0, layout: layout, toward: head, inboxMark: inboxMark)
            }
            if progress.reached { return nil }
            inboxMark = progress.inboxMark
            let time = ContinuousClock.now
            if progress.checkpoint != checkpoint || !progress.readable { (checkpoint, moved) = (progress.checkpoint, time) }
            if time - start >= maxWait || time - moved >= stallLimit { return nil }
        }
    }

    /// `read` on a connection of the pool once the projections hold every event committed when
    /// this was called (`waitForProjections`), and the lag beside it (with `networks`, theirs).
    ///
    /// On a distributed log the coordinator is asked first whether the appends' marks show every
    /// event projected (`CitusLog.caughtUpByMarks`), and `read` runs after it. Otherwise `read`
    /// runs on the coordinator while the workers are asked whether any row waits past the
    /// checkpoints listed just before: its snapshot is taken after that listing, so when none
    /// waits the projections it read held every event committed before the call. When one
    /// waits, the rows are read again after the wait.
    func readingYourWrites<T: Sendable>(maxWait: Duration, stallLimit: Duration, networks: NetworkScope? = nil,
                                        _ read: @escaping @Sendable (Connection) throws -> T) async throws -> (T, ProjectionLag) {
        let conninfo = pool.conninfo
        var eventsWait = false
        if maxWait > .zero, let log = LogLayout.knownDistributed(conninfo: conninfo) {
            let (early, waiting) = try await pool.withConnection { c -> (T?, Bool) in
                if try CitusLog.caughtUpByMarks(on: c) { return (try read(c), false) }
                let shards = try log.shards(on: c)
                // What one group's step owes another's states waits like the log.
                if shards.inboxEntries > 0 { return (nil, true) }
                let (backlog, value) = try log.backlog(shards, cap: 1) { try read(c) }
                // A pass that failed (a shard moved between the listing and the read) proves
                // nothing: the wait below lists the shards again.
                guard case .success(let backlog) = backlog else { return (nil, false) }
                return backlog.values.allSatisfy({ $0.events == 0 }) ? (value, false) : (nil, true)
            }
            if let early { return (early, ProjectionLag(events: 0, seconds: 0)) }
            eventsWait = waiting
        }
        // Events waited a moment ago: the wait goes straight to the heads and the checkpoints.
        let caughtUp = try await waitForProjections(maxWait: maxWait, stallLimit: stallLimit, lookForCaughtUp: !eventsWait)
        return try await pool.withConnection { c in
            (try read(c), try caughtUp ?? Self.lag(on: c, conninfo: conninfo, networks: networks))
        }
    }

    /// What the first look of `waitForProjections` found.
    private enum FirstLook {
        /// A distributed log with no event waiting on any shard.
        case caughtUp
        /// An empty log.
        case empty
        /// The head, and how far the projections are toward it.
        case behind(LogLayout, LogHead, LogProgress)
    }

    /// Prepared once per connection: each reads every partition of the log, and planning that
    /// anew would be a large part of every report.
    enum SQL {
        /// The newest committed event: where `catchUp` stops.
        /// (`events.tx`: a bare `tx` would sort by the output column, the text, where '1000' < '999'.)
        static let head = PreparedStatement(name: "tracker_log_head", sql: "SELECT tx::text, seq FROM events ORDER BY events.tx DESC, events.seq DESC LIMIT 1")

        /// Whether the checkpoint reached `($1, $2)`; the checkpoint (to see it move); whether
        /// events beyond it are readable now (else the projector waits for an older transaction)
        /// while no projector of this database runs (`projectorRuns`).
        static let reached = PreparedStatement(name: "tracker_log_reached", sql: """
            SELECT (s.checkpoint_tx, s.checkpoint_seq) >= ($1::xid8, $2::bigint), s.checkpoint_tx::text || '/' || s.checkpoint_seq,
                   EXISTS (SELECT 1 FROM events e WHERE (e.tx, e.seq) > (s.checkpoint_tx, s.checkpoint_seq)
                                                   AND e.tx < pg_snapshot_xmin(pg_current_snapshot()))
                   AND NOT \(projectorRuns(step: "$3", running: "$4"))
            FROM projection_state s
            """)

        /// Whether a projector of this database runs: one holds `Projector`'s step lock (`step`,
        /// however long its step takes on a busy machine) or the lock a running projector holds
        /// for its life (`running`, however long it is starved between steps).
        static func projectorRuns(step: String, running: String) -> String {
            """
            EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                      AND ((l.classid::bigint << 32) | l.objid::bigint) IN (hashtext(\(step))::bigint, hashtext(\(running))::bigint))
            """
        }

        /// `projectorRuns` alone, on the coordinator of a Citus cluster.
        static let projectorRunning = PreparedStatement(name: "tracker_log_projector_runs",
                                                        sql: "SELECT \(projectorRuns(step: "$1", running: "$2"))")

        /// The checkpoint goes in as scalar subqueries, which the planner turns into parameters
        /// of an index condition on (tx, seq); joined in as a row it scanned the whole log.
        /// Column 2 estimates the events behind from `event_seq` (every logged event took a number;
        /// off by the 64 numbers each writer connection caches, and by the rows of groups whose
        /// plain append met a stored id and rolled back: an estimate, used beyond the count's cap).
        /// The cap is written into the text, not a parameter: with a parameter for `LIMIT`,
        /// PostgreSQL keeps a custom plan, planned anew at every call over every partition.
        /// `lag` counted over the ad units of the networks $1 only, among the first `cap` unprojected events.
        static let lagOfNetworks = PreparedStatement(name: "tracker_log_lag_of_networks", sql: """
            SELECT count(*), COALESCE(extract(epoch FROM now() - min(received_at)), 0)::float8::text
            FROM (
                SELECT received_at, ad_unit FROM events
                WHERE (tx, seq) > ((SELECT checkpoint_tx FROM projection_state), (SELECT checkpoint_seq FROM projection_state))
                ORDER BY tx, seq
                LIMIT \(ProjectionLag.cap)
            ) pending
            WHERE split_part(ad_unit, '/', 2) = ANY($1::text[])
            """)

        static let lag = PreparedStatement(name: "tracker_log_lag", sql: """
            SELECT count(*), COALESCE(extract(epoch FROM now() - min(received_at)), 0)::float8::text,
                   (SELECT GREATEST(0, COALESCE(pg_sequence_last_value('event_seq'), 0) - checkpoint_seq) FROM projection_state)
            FROM (
                SELECT received_at FROM events
                WHERE (tx, seq) > ((SELECT checkpoint_tx FROM projection_state), (SELECT checkpoint_seq FROM projection_state))
                ORDER BY tx, seq
                LIMIT \(ProjectionLag.cap)
            ) pending
            """)
    }
}

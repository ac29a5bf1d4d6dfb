import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// Maintains the projection tables from the log, exactly once.
///
/// Each step reads the next events in log order, recomputes the contribution of every ad
/// they touch, and commits the changed rows together with the new checkpoint in one
/// transaction: a crash loses the step entirely or not at all. A transaction-level
/// advisory lock makes two projectors of the whole log on one database take turns rather
/// than collide; projectors of groups of a distributed log's shards (`group`) share it and
/// step at once.
public final class Projector: Service, Sendable {
    public let batchSize: Int
    public let pollInterval: Duration
    private let pool: ConnectionPool
    private let attributionWindow: Duration
    private let logger: Logger
    /// Log events consumed (projected or skipped): the projector's throughput as a rate.
    private let projectedEvents = Counter(label: "tracker_projector_events_total")
    /// Time of one step's transaction.
    private let stepDuration = Timer(label: "tracker_projector_step_duration_seconds")
    /// Impressions projected, by the invalid-traffic label they carry (`none`: not labelled):
    /// their ratio is the GIVT share an alert watches, as events happen rather than per report day.
    private let impressions: [IVTLabel?: Counter]
    /// Valid events of loads projected, by type (`ad_loaded`: those naming their load): the fill
    /// rate (`ad_loaded` / `ad_request`) and the failure rate an alert watches.
    private let loadEvents: [EventType: Counter]
    /// Whether this projector runs or stopped, and why: `/readyz` reads it.
    public let status: ProjectorStatus
    /// The invalid-traffic rules of the projections, compiled once and kept between steps.
    private let labellers = LabellerCache()
    /// Held while `run()` projects: how a report waiting for its writes tells a projector that
    /// is slow between steps from none at all (`LogCursor.SQL.reached`).
    private let presence: PresenceLock

    /// Projection rows a step holds before it writes them (`ProjectionChanges`).
    public let rowsPerWrite: Int
    /// The group of shards this projector reads, one of several projectors working at once on
    /// a distributed log; `nil`: the whole log, taking turns with any other projector.
    public let group: ProjectorGroup?
    /// When the last step that read the log began. On a distributed log a step between two
    /// reads first asks the coordinator whether an append's mark lies past the shards' drained
    /// horizons (`CitusLog.caughtUpByMarks`), and reads the workers only then: an idle
    /// projector's read is a union over every shard's daily partitions on every worker.
    private let lastRead = Mutex<ContinuousClock.Instant?>(nil)
    /// The next window of a single-node log, read while a step that took a full share folds
    /// and commits it.
    private let readAhead: ReadAhead
    /// The longest an idle projector on a distributed log goes without reading the workers:
    /// rows written into the log without a mark (by hand, in SQL) wait at most this long.
    static let unmarkedRowsWait = Duration.seconds(1)

    /// Events read and projected per step (`TRACKER_PROJECTOR_BATCH_SIZE`).
    public static let defaultBatchSize = 20_000
    /// Projection rows held before they are written, in a step or a rebuild: about 0.4 KiB each
    /// while held (a key and its measures) and as much again in the writer's working copies, a
    /// few MiB in all, whatever the number of distinct ad units, formats, asset keys and
    /// adapters the events name. A step of an app's traffic touches far fewer (a few ad units
    /// and asset keys, a few quarter hours), so it writes its rows once, as it would unbounded.
    public static let defaultRowsPerWrite = 4_000

    public init(pool: ConnectionPool, attributionWindow: Duration = AdContribution.defaultAttributionWindow, batchSize: Int = Projector.defaultBatchSize,
                rowsPerWrite: Int = Projector.defaultRowsPerWrite, group: ProjectorGroup? = nil,
                pollInterval: Duration = .milliseconds(100), status: ProjectorStatus = ProjectorStatus(), logger: Logger) {
        self.pool = pool
        self.group = group
        self.attributionWindow = attributionWindow
        self.batchSize = batchSize
        self.rowsPerWrite = rowsPerWrite
        self.pollInterval = pollInterval
        self.status = status
        self.logger = logger
        readAhead = ReadAhead(pool: pool, logger: logger)
        presence = PresenceLock(conninfo: pool.conninfo, name: ProjectorSQL.running, applicationName: "tracker projector")
        let labels: [IVTLabel?] = [nil] + IVTLabel.stored.map { $0 }
        impressions = Dictionary(uniqueKeysWithValues: labels.map { label in
            (label, Counter(label: "tracker_projector_impressions_total", dimensions: [("ivt", label?.rawValue ?? "none")]))
        })
        loadEvents = Dictionary(uniqueKeysWithValues: [EventType.adRequest, .adFailed, .adLoaded, .mediationResult].map { type in
            (type, Counter(label: "tracker_projector_load_events_total", dimensions: [("type", type.rawValue)]))
        })
    }

    /// Projects until graceful shutdown; a failed step is retried after a pause.
    ///
    /// A database that is down (also at start: the window check is inside the loop) only
    /// delays it. What a retry cannot fix stops it, with the reason in `status`, while the
    /// process goes on serving: a log row it cannot read (skipping it would drop an event
    /// from every report, silently) or projections computed with another attribution window.
    public func run() async throws {
        let stopped: ProjectorError? = await cancelWhenGracefulShutdown {
            var windowChecked = false
            // A projector whose steps fail is not projecting: reports should not wait for it.
            var stepping = true
            while !Task.isCancelled {
                if stepping { await self.presence.hold() }
                do {
                    if !windowChecked {
                        try await self.checkWindow()
                        windowChecked = true
                    }
                    let more = try await self.stepOutcome().more
                    stepping = true
                    if !more {
                        try? await Task.sleep(for: self.pollInterval)
                    }
                } catch let error as ProjectorError {
                    self.logger.critical("projector stopped; ingestion and reports go on, reports no longer advance", metadata: ["tracker.error": "\(error)"])
                    self.status.stop(error)
                    self.readAhead.discard()
                    self.presence.release()
                    // Alone (`tracker project`), the process ends with the error. Inside `tracker serve`
                    // it waits for the shutdown and the server goes on: nothing here changes by itself.
                    if self.status.endsTheRun { return error }
                    while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
                } catch {
                    self.logger.warning("projection step failed; retrying", metadata: ["tracker.error": "\(String(reflecting: error))"])
                    stepping = false
                    self.presence.release()
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            return nil
        }
        presence.release()
        readAhead.discard()
        if let stopped { throw stopped }
    }

    /// Refuses to mix two attribution windows in one set of projections.
    func checkWindow() async throws {
        let window = attributionWindow
        try await pool.withConnection { try Self.settleState(on: $0, window: window) }
    }

    /// `lockState` in a transaction of its own, under the projector's lock taken exclusively:
    /// the window and the rule set are set, when they are, while no step of any projector runs.
    static func settleState(on connection: Connection, window: Duration) throws {
        _ = try connection.transaction {
            try connection.lockForTransaction(ProjectorSQL.lock)
            return try lockState(on: connection, window: window)
        }
    }

    /// What became of the windows of a single-node log this projector read ahead of its steps,
    /// while the step before folded (also `tracker_projector_read_ahead_total`).
    public var readAheadTally: ReadAheadTally { readAhead.counts }

    /// Waits until the window being read ahead, if any, is read; the next step takes it.
    /// Tests call it to know which steps find their window read.
    func readAheadSettled() async {
        await readAhead.settled()
    }

    /// Projects the next events of the log; returns how many log events it consumed.
    @discardableResult
    public func step() async throws -> Int {
        try await stepOutcome().consumed
    }

    private func stepOutcome() async throws -> StepOutcome {
        let window = attributionWindow
        let limit = StepLimits(events: batchSize, rowsPerWrite: rowsPerWrite)
        let (labellers, conninfo, group, readAhead) = (self.labellers, pool.conninfo, self.group, self.readAhead)
        let ahead = await readAhead.take()
        let started = ContinuousClock.now
        let outcome = try await pool.withConnection { connection in
            let layout = try LogLayout.of(connection, conninfo: conninfo)
            if case .citus = layout, let last = self.lastRead.withLock({ $0 }), started - last < Self.unmarkedRowsWait,
               try CitusLog.caughtUpByMarks(on: connection) {
                return StepOutcome(consumed: 0, more: false)
            }
            self.lastRead.withLock { $0 = started }
            let outcome = try connection.transaction {
                try Self.step(on: connection, layout: layout, window: window, limit: limit, labellers: labellers, drains: true, group: group,
                              ahead: ahead, readingAhead: readAhead)
            }
            if outcome.stateDue { try Self.settleState(on: connection, window: window) }
            return outcome
        }
        // A window the step did not look at (the log is no longer on one node, or the state
        // had to be settled first) goes now.
        if let ahead { _ = readAhead.rows(of: ahead, at: nil) }
        if outcome.consumed > 0 {
            stepDuration.recordNanoseconds((ContinuousClock.now - started).nanoseconds)
            projectedEvents.increment(by: outcome.consumed)
            for (label, n) in outcome.impressions.counts { impressions[label]?.increment(by: n) }
            for (type, n) in outcome.impressions.loadEvents { loadEvents[type]?.increment(by: n) }
        }
        return outcome
    }

    /// Projects until every event committed before the call is projected; returns the events consumed.
    ///
    /// An event becomes readable only once every older transaction in the cluster has ended
    /// (see `ProjectorSQL.nextEvents`), so this may wait for a transaction that is still open.
    @discardableResult
    public func catchUp() async throws -> Int {
        try await checkWindow()
        let (window, pause, labellers, conninfo, group) = (attributionWindow, pollInterval, labellers, pool.conninfo, self.group)
        let limit = StepLimits(events: batchSize, rowsPerWrite: rowsPerWrite)
        return try await pool.withConnection { c in
            let layout = try LogLayout.of(c, conninfo: conninfo)
            var head = try LogCursor.head(on: c, layout: layout)
            // A group catches up with its own shards.
            if let group, case .citus(let log) = layout, case .shards(let heads) = head {
                let own = group.shards(of: try log.shards(on: c).all.map(\.id))
                head = .shards(heads.filter { own.contains(abs($0.key)) })
            }
            return try Self.catchUp(on: c, layout: layout, to: head, window: window, limit: limit,
                                    pause: pause, labellers: labellers, drains: true, group: group)
        }
    }

    /// Steps on `connection`, one transaction per step, until the checkpoint reaches `head`.
    ///
    /// `searchPath` points the steps at other projection tables (a rebuild's fresh schema);
    /// `drains` is `step`'s.
    static func catchUp(on connection: Connection, layout: LogLayout, to head: LogHead?, window: Duration, limit: StepLimits,
                        pause: Duration, labellers: LabellerCache, searchPath: String? = nil, drains: Bool = false,
                        group: ProjectorGroup? = nil) throws -> Int {
        func inTransaction<T>(_ body: () throws -> T) throws -> T {
            try connection.transaction {
                if let searchPath { try connection.execute("SET LOCAL search_path = \(searchPath)") }
                return try body()
            }
        }
        var total = 0
        while true {
            let outcome = try inTransaction {
                try step(on: connection, layout: layout, window: window, limit: limit, labellers: labellers, drains: drains, group: group)
            }
            total += outcome.consumed
            if outcome.stateDue { try settleState(on: connection, window: window) }
            if outcome.more { continue }
            guard let head else { return total }
            let reached = try inTransaction {
                try LogCursor.progress(on: connection, layout: layout, toward: head, waitsForInbox: false).reached
            }
            if reached { return total }
            // Nothing readable yet: an older transaction elsewhere is still open.
            if outcome.consumed == 0 { try connection.sleep(for: pause) }
        }
    }

    /// What one step did: the log events it consumed, whether more were ready than it took (or
    /// it folded entries of the groups' inbox, after which more may have come), and the
    /// impressions it labelled or not.
    struct StepOutcome {
        var consumed: Int
        var more: Bool
        var impressions = ImpressionTally()
        /// A projector of a group found the window or the rule set to be set (nothing is
        /// projected yet): it did nothing, and `settleState` sets them before its next step
        /// (`more` is set: that step follows at once).
        var stateDue = false
    }

    /// What one step takes on at most: the log events it reads, and the projection rows it
    /// holds before it writes them.
    struct StepLimits: Sendable {
        var events: Int
        var rowsPerWrite: Int
    }

    /// One step in the caller's transaction: the next events of the log, read under the
    /// projector's lock, folded into the projections with the new checkpoints.
    ///
    /// - Parameters:
    ///   - drains: whether a step on a distributed log records the horizons below which each
    ///     shard is read (`CitusLog.recordDrained`): the live projections' projector does, a
    ///     rebuild's steps on its own tables do not.
    ///   - group: the group of shards the step reads (`nil`: the whole log). Projectors of groups
    ///     share the projector's lock, so they step at once while a projector of the whole log
    ///     or a rebuild's swap waits for them all.
    ///   - ahead: the window of a single-node log read ahead of this step, which it reads from
    ///     when the window starts at its checkpoint.
    ///   - readingAhead: the projector's `ReadAhead`, which hands the step its window and starts
    ///     reading the next one before the step folds its own.
    static func step(on connection: Connection, layout: LogLayout, window: Duration, limit: StepLimits, labellers: LabellerCache,
                     drains: Bool = false, group: ProjectorGroup? = nil,
                     ahead: ReadAhead.Window? = nil, readingAhead: ReadAhead? = nil) throws -> StepOutcome {
        // The planner settings keep every statement of the step on its index, and the step's
        // commit is durable (see ProjectorSQL.stepSettings).
        try connection.execute(ProjectorSQL.stepSettings)
        if group != nil {
            try connection.execute(ProjectorSQL.groupStepSettings)
            try connection.query(ProjectorSQL.lockShared, [ProjectorSQL.lock])
        } else {
            try connection.lockForTransaction(ProjectorSQL.lock)
        }
        let layout = try layout.refreshed(on: connection)
        guard let (tx, seq, ivtRules) = try group == nil ? lockState(on: connection, window: window) : readState(on: connection, window: window) else {
            return StepOutcome(consumed: 0, more: true, stateDue: true)
        }
        switch layout {
        case .singleNode, .coordinator:
            if let group { throw ProjectorError.groupsNeedADistributedLog(group: group.description) }
            var routing = ShardRouting(own: nil, distributed: false)
            var strings = StringTable()
            // The rows read go once they are in the batch: the step holds one copy of its events
            // (and the window read ahead of the next step is being read meanwhile).
            let (batch, read): (LogBatch, Int) = try {
                let rows = try nextRows(of: layout, after: tx, seq, limit: limit.events, ahead: ahead, readingAhead: readingAhead, on: connection)
                return (try LogBatch(rows, shardColumn: false, strings: &strings), rows.reduce(0) { $0 + $1.rowCount })
            }()
            guard read > 0 else { return StepOutcome(consumed: 0, more: false) }
            let impressions = try project(batch, routing: &routing, ivtRules: ivtRules, window: window, labellers: labellers, rowKey: .rowID,
                                          rowsPerWrite: limit.rowsPerWrite, strings: &strings, on: connection)
            try connection.query(ProjectorSQL.checkpoint, [String(batch.lastTx), String(batch.lastSeq), String(read)])
            return StepOutcome(consumed: read, more: read == limit.events, impressions: impressions)
        case .citus(let log):
            // Each shard in its own order, an equal share of the step each.
            var shards = try log.shards(on: connection)
            var own: Set<Int64>?
            if let group {
                // The group's shards, their checkpoints locked first and then read: another
                // projector that counts them in its group waits for this step's commit.
                let ownShards = group.shards(of: shards.all.map(\.id))
                var ids = BinaryArray(.int8, capacity: ownShards.count)
                for id in ownShards { ids.append(id) }
                try connection.query(CitusSQL.lockShards, [ids.parameter])
                shards = try log.shards(on: connection)
                shards.all.removeAll { !ownShards.contains($0.id) }
                guard !shards.all.isEmpty else { return StepOutcome(consumed: 0, more: false) }
                own = ownShards
            }
            var routing = ShardRouting(own: own, distributed: true)
            let perShard = max(limit.events / shards.count, 1)
            let (results, below) = try log.nextEvents(shards, limit: perShard)
            let consumed = results.reduce(0) { $0 + $1.rowCount }
            var outcome = StepOutcome(consumed: consumed, more: false)
            var ends: [Int64: LogBatch.ShardEnd] = [:]
            var strings = StringTable()
            let inbox = shards.inboxEntries > 0
                ? try Inbox.read(for: routing.own, limit: limit.events, strings: &strings, on: connection) : (entries: [], seqs: BinaryArray(.int8))
            if consumed > 0 || !inbox.entries.isEmpty {
                let batch = try LogBatch(results, shardColumn: true, strings: &strings)
                outcome.impressions = try project(batch, inbox: inbox.entries, routing: &routing, ivtRules: ivtRules, window: window,
                                                  labellers: labellers, rowKey: .requestId, rowsPerWrite: limit.rowsPerWrite,
                                                  strings: &strings, on: connection)
                try Inbox.settle(read: inbox.seqs, outbox: routing.outbox, on: connection)
                try log.advance(shards, to: batch.shardEnds, retires: group == nil, on: connection)
                if consumed > 0 { try connection.query(ProjectorSQL.countProjected, [String(consumed)]) }
                ends = batch.shardEnds
                outcome.more = ends.values.contains { $0.rows >= perShard } || !inbox.entries.isEmpty
            }
            if drains {
                // A coordinator-stamped cursor that gave fewer rows than its share has none left below the horizon.
                let drained = shards.all.filter { $0.cursor > 0 && (ends[$0.cursor]?.rows ?? 0) < perShard }.map(\.cursor)
                try log.recordDrained(drained, below: below, on: connection)
            }
            return outcome
        }
    }

    /// The rows after (`tx`, `seq`) a step on one table takes, at most `limit`: those of the
    /// window read ahead from there (`ahead`, when it starts there on a single-node log), then
    /// the rest of the share, read now. On a single-node log it then tells `readingAhead` where
    /// the step's read ended, which starts the next window.
    private static func nextRows(of layout: LogLayout, after tx: String, _ seq: Int64, limit: Int, ahead: ReadAhead.Window?,
                                 readingAhead: ReadAhead?, on connection: Connection) throws -> [QueryResult] {
        var start: ReadAhead.Position?
        if case .singleNode = layout, let tx = UInt64(tx) { start = ReadAhead.Position(tx: tx, seq: seq) }
        var rows: [QueryResult] = []
        if let ahead, let readingAhead, let window = readingAhead.rows(of: ahead, at: start) { rows.append(window) }
        let taken = rows.first?.rowCount ?? 0
        if taken < limit {
            let from = try rows.first.map(ReadAhead.Position.init(lastOf:))
            rows.append(try layout.nextEvents(after: from.map { String($0.tx) } ?? tx, from?.seq ?? seq, limit: limit - taken, on: connection))
        }
        if let readingAhead, let start, let last = rows.last(where: { $0.rowCount > 0 }) {
            let read = rows.reduce(0) { $0 + $1.rowCount }
            readingAhead.stepRead(from: start, to: try ReadAhead.Position(lastOf: last), full: read == limit, limit: limit)
        }
        return rows
    }

    /// Folds a step's events into the projections (in the caller's transaction).
    private static func project(_ batch: LogBatch, inbox: [InboxEntry] = [], routing: inout ShardRouting, ivtRules: Int, window: Duration,
                                labellers: LabellerCache, rowKey: AdStateStore.RowKey, rowsPerWrite: Int, strings: inout StringTable,
                                on connection: Connection) throws -> ImpressionTally {
        guard !batch.events.isEmpty || !inbox.isEmpty else { return ImpressionTally() }
        let labeller = try labellers.labeller(version: ivtRules, on: connection)
        return try AdStateStore.project(batch, inbox: inbox, routing: &routing,
                                        rules: AdContribution(attributionWindow: window, maxClicksPerAd: labeller.rules.maxClicksPerAd),
                                        labeller: labeller, rowKey: rowKey, rowsPerWrite: rowsPerWrite, strings: &strings, on: connection)
    }

    /// Locks the state row and returns the checkpoint and the invalid-traffic rule set of the
    /// projections, after making sure they were computed with `window` (set it when nothing is
    /// projected yet, refuse otherwise). Projections with nothing in them take the newest rule
    /// set; others keep theirs until `tracker rebuild` applies a newer one.
    static func lockState(on connection: Connection, window: Duration) throws -> (tx: String, seq: Int64, ivtRules: Int) {
        let state = try ProjectionStateRow(try connection.query(ProjectorSQL.state))
        if try state.lacks(window) {
            try connection.query(ProjectorSQL.setWindow, [String(window.microseconds)])
        }
        if let newer = state.newerRules {
            try connection.query(ProjectorSQL.setIVTRules, [String(newer)])
        }
        return (state.tx, state.seq, state.newerRules ?? state.rules)
    }

    /// `lockState` for a projector of a group, whose steps share the state row: read without a
    /// lock; `nil` when the window or the rule set is to be set first (`settleState`, which
    /// waits for every step), since two groups setting them at once could each project with
    /// another rule set.
    static func readState(on connection: Connection, window: Duration) throws -> (tx: String, seq: Int64, ivtRules: Int)? {
        let state = try ProjectionStateRow(try connection.query(ProjectorSQL.stateUnlocked))
        if try state.lacks(window) || state.newerRules != nil { return nil }
        return (state.tx, state.seq, state.rules)
    }
}

/// The row of `projection_state` (`ProjectorSQL.state`), and what a projector must set in it
/// before it projects.
private struct ProjectionStateRow {
    var tx: String
    var seq: Int64
    var window: Int64
    var projected: Int64
    var rules: Int
    /// The newest rule set, which projections with nothing in them take (`nil`: they keep theirs).
    var newerRules: Int?

    init(_ state: QueryResult) throws {
        guard state.rowCount == 1, let tx = state.string(0, 0), let seq = state.int64(0, 1),
              let window = state.int64(0, 2), let projected = state.int64(0, 3), let rules = state.int64(0, 4) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "projection_state must hold one row")
        }
        (self.tx, self.seq, self.window, self.projected, self.rules) = (tx, seq, window, projected, Int(rules))
        let newest = state.int64(0, 5).map { Int($0) }
        newerRules = projected == 0 && newest != nil && newest != self.rules ? newest : nil
    }

    /// Whether the projections lack `window` yet (nothing projected); throws when they were
    /// computed with another.
    func lacks(_ configured: Duration) throws -> Bool {
        guard window != configured.microseconds else { return false }
        guard projected == 0 else { throw ProjectorError.windowMismatch(projected: .microseconds(window), configured: configured) }
        return true
    }
}

/// Whether a projector runs, or stopped on something a retry cannot fix (and why).
public final class ProjectorStatus: Sendable {
    private let stopped = Mutex<ProjectorError?>(nil)
    /// Whether `Projector.run` throws the error that stopped it (the `tracker project`
    /// process), rather than wait for the shutdown while the server goes on (`tracker serve`).
    public let endsTheRun: Bool

    /// For a projector inside the server: it stops, the run waits for the shutdown.
    public convenience init() {
        self.init(endsTheRun: false)
    }

    public init(endsTheRun: Bool) {
        self.endsTheRun = endsTheRun
    }

    /// The error that stopped the projector, `nil` while it runs.
    public var stopReason: ProjectorError? { stopped.withLock { $0 } }

    func stop(_ error: ProjectorError) { stopped.withLock { $0 = error } }
}

public enum ProjectorError: Error, Sendable, Equatable, CustomStringConvertible {
    case windowMismatch(projected: Duration, configured: Duration)
    /// A log row this binary cannot read (e.g. an event type added by a newer version): the
    /// projector stops at it rather than move its checkpoint past an event it did not count.
    case unreadableLogRow(tx: String, seq: String, field: String)
    /// An ad's packed state (`ad_state`) does not follow the layout this binary reads.
    case unreadableAdState(requestId: String)
    /// Another `tracker rebuild` holds the rebuild lock on this database.
    case rebuildRunning
    /// Retention dropped these days of the log, so a rebuild would empty their report rows.
    case logTruncated(days: Int, first: String, last: String)
    /// A projector of a group of shards runs where the log is not distributed.
    case groupsNeedADistributedLog(group: String)
    /// A stored rule set this binary cannot read (written by a newer version?).
    case unreadableRuleSet(version: Int, reason: String)
    /// A shard of a log distributed by an older tracker moved while rows stamped in its former
    /// worker's order wait: those transaction ids mean nothing on the new node.
    case shardMoved(shard: Int64, node: String)
    /// A shard of a distributed log has more than one placement (it is read on one worker).
    case shardReplicated(shard: Int64)

    public var description: String {
        switch self {
        case .unreadableLogRow(let tx, let seq, let field):
            "the log row at (tx \(tx), seq \(seq)) has a \(field) this tracker cannot read (written by a newer version?); the projector stopped before it: upgrade the tracker, then restart it"
        case .unreadableAdState(let requestId):
            "the projected state of ad '\(requestId)' (ad_state) does not follow the layout this tracker reads; the projector stopped: run 'tracker rebuild' or upgrade the tracker"
        case .logTruncated(let days, let first, let last):
            "retention dropped \(days) day(s) of the log (\(first) to \(last)); a rebuild replays only the kept log and would empty their report rows. Pass --discard-dropped-days to rebuild anyway"
        case .rebuildRunning:
            "another 'tracker rebuild' is running on this database; wait for it to finish"
        case .unreadableRuleSet(let version, let reason):
            "invalid-traffic rule set \(version) cannot be read by this tracker (\(reason)); the projector stopped: upgrade the tracker"
        case .shardMoved(let shard, let node):
            "shard \(shard) of the log moved to \(node) while rows stamped in its former worker's order wait to be projected; the projector stopped: move it back, and move shards once those rows are projected (docs/SCALING.md, \"What is not supported\")"
        case .groupsNeedADistributedLog(let group):
            "this projector reads group \(group) of the log's shards, but the log is not distributed; the projector stopped: run it without --group (TRACKER_PROJECTOR_GROUP), or distribute the log first (docs/SCALING.md, \"Citus\")"
        case .shardReplicated(let shard):
            "shard \(shard) of the log has more than one placement; the projector stopped: the Citus layout needs citus.shard_replication_factor = 1 (docs/SCALING.md, \"Citus\")"
        case .windowMismatch(let projected, let configured):
            "the projections were computed with an attribution window of \(projected.microseconds / 1_000_000) s but the tracker is configured with \(configured.microseconds / 1_000_000) s: run 'tracker rebuild' to recompute them"
        }
    }
}

enum ProjectorSQL {
    /// The advisory lock projectors on one database take turns on, one step at a time.
    static let lock = "tracker.projector"
    /// The shared lock each running projector holds for its life (`PresenceLock`).
    static let running = "tracker.projector.running"
    /// Taken by a projector of a group of shards, in a step that projects, before it writes
    /// rows that other groups write too: the half-day projection rows (read, added to and
    /// written back), then the checkpoints' count and the marks. Held until the step commits.
    static let rowsLock = "tracker.projector.rows"
    /// A group's writes of `ad_state` reach every shard (an update by request id cannot be
    /// routed to the shards of its keys), and Citus lets one multi-shard write at a time run on a
    /// shard, to keep two of them from locking the same rows in different orders: the groups'
    /// steps would wait for each other from their first write of states to their commit. They
    /// never write the same row (each writes the states of its own shards only), so that
    /// ordering is not needed between them.
    static let groupStepSettings = "SET LOCAL citus.enable_deadlock_prevention = off"
    /// `lock` in share mode: the projectors of groups step at once.
    static let lockShared = "SELECT pg_advisory_xact_lock_shared(hashtext($1))"

    /// Every statement of a step wants its index: the log in (tx, seq) order, `ad_state` by
    /// request id or ctid, the day tables by primary key. The planner does not always see it:
    /// before autovacuum has analysed today's partition (or after it grew since) it estimates
    /// a few thousand rows behind the checkpoint and sorts the whole partition instead of
    /// reading the index in order (docs/PROJECTOR-DESIGN.md). A disabled plan's cost (10^10) is
    /// above `jit_above_cost`, and compiling a one-row UPDATE with LLVM costs far more than
    /// running it: no JIT (the step's statements are short). SET LOCAL ends with the
    /// transaction. Shared with the reads of a Citus worker (`CitusSQL.readSettings`).
    static let plannerSettings = """
        SET LOCAL jit = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off;
        SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off
        """

    /// `plannerSettings`, and the step's commit durable whatever the database's default
    /// (`synchronous_commit = on`): a report never shows numbers that a database crash could
    /// take back. On Citus, the step's writes of per-ad state go to every shard over one
    /// connection per worker, not one per shard (`EventLog.Configuration.sessionSetup` says
    /// why); elsewhere that setting is an unused placeholder.
    static let stepSettings = "SET LOCAL synchronous_commit = on; " + plannerSettings
        + "; SET LOCAL citus.max_adaptive_executor_pool_size = 1; " + frozenStepLimit

    /// A step is idle inside its transaction only while the tracker folds between two
    /// statements or, on Citus, while it reads the workers: moments. A projector frozen in the
    /// middle of one (a stopped process, a paused machine) would keep its locks on the state
    /// and log shards for as long as it is frozen, and a Citus shard move, which blocks writes
    /// to the shards it moves while it waits for them, would hold every append to those shards
    /// with it. After 30 s idle the server closes the session, which ends its transaction; the
    /// projector connects again and steps again when it wakes. A worker read held longer than
    /// that (by a move's lock) fails the step the same way, and the step is retried.
    static let frozenStepLimit = "SET LOCAL idle_in_transaction_session_timeout = '30s'"

    /// Binary columns: the `AdEventColumn`s, then tx and seq (read by `LogBatch`).
    static let nextEvents = """
        SELECT \(AdEventColumn.list), tx, seq
        FROM events
        WHERE (tx, seq) > ($1::xid8, $2::bigint)
          AND tx < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY events.tx, events.seq  -- the table's xid8 (a text column of the same name would sort as text)
        LIMIT $3::int
        """

    /// Columns: 0 checkpoint tx, 1 checkpoint seq, 2 attribution window (µs), 3 events projected,
    /// 4 the projections' rule set, 5 the newest rule set.
    static let state = """
        SELECT checkpoint_tx::text, checkpoint_seq, (extract(epoch FROM attribution_window) * 1000000)::bigint,
               events_projected, ivt_rules, (SELECT max(version) FROM ivt_rule_sets)
        FROM projection_state FOR UPDATE
        """

    /// `state` unlocked (`readState`).
    static let stateUnlocked = String(state.dropLast(" FOR UPDATE".count))

    static let setIVTRules = "UPDATE projection_state SET ivt_rules = $1::int"

    static let checkpoint = """
        UPDATE projection_state SET checkpoint_tx = $1::xid8, checkpoint_seq = $2::bigint,
               events_projected = events_projected + $3::bigint, updated_at = now()
        """

    /// The Citus layout's share of `checkpoint`: the shards keep their own positions (log_shards).
    static let countProjected = """
        UPDATE projection_state SET events_projected = events_projected + $1::bigint, updated_at = now()
        """

    static let setWindow = "UPDATE projection_state SET attribution_window = make_interval(secs => $1::bigint / 1000000.0)"
}

/// The compiled rule set of a projector's projections, kept between steps (compiling a list of
/// patterns, and learning which user agents match, is done once, not per step).
final class LabellerCache: Sendable {
    private let current = Mutex<IVTLabeller?>(nil)

    /// The labeller of rule set `version`, loaded when it is not the one kept.
    func labeller(version: Int, on connection: Connection) throws -> IVTLabeller {
        if let kept = current.withLock({ $0 }), kept.version == version { return kept }
        let stored = try IVTRuleSets.load(version: version, on: connection)
        let labeller: IVTLabeller
        do {
            labeller = try IVTLabeller(version: stored.version, rules: stored.ruleSet)
        } catch {
            throw ProjectorError.unreadableRuleSet(version: version, reason: "\(error)")
        }
        current.withLock { $0 = labeller }
        return labeller
    }
}

import Logging

/// Progress of a rebuild, reported as it goes (for a terminal progress bar).
public struct RebuildProgress: Sendable {
    public var phase: String
    public var done: Int
    public var total: Int
    public var elapsed: Duration
}

/// Replays the whole log into fresh projections and swaps them in atomically.
///
/// The fresh tables live in the schema `tracker_rebuild` while they are built, so the server
/// keeps serving reports from the current ones. Phases:
/// 1. take the log horizon H (the snapshot's xmin: every event with tx < H is final);
/// 2. "copying": stream every final event out of the log (binary COPY, partition by
///    partition, in the log's physical order) into spill files by a hash of the ad
///    (`RebuildBuckets`), so each ad's events end up in one file;
/// 3. "projecting": one file at a time, group the events by ad, sum every ad's contribution
///    (the same pure function the incremental projector uses) and stream each ad's packed
///    state into the new `ad_state` (binary COPY); then write the day tables;
/// 4. "indexing": the primary key of the new `ad_state`;
/// 5. catch up from H with the incremental projector, pointed at the new schema, at least to
///    the newest event committed when the rebuild began;
/// 6. under the projector lock, project the last events and swap the schemas in one transaction.
public struct Rebuild: Sendable {
    private let pool: ConnectionPool
    private let attributionWindow: Duration
    private let logger: Logger
    /// Log events per spill file (`TRACKER_REBUILD_FILE_EVENTS`): one file's ads are in memory
    /// at a time per core, a few files ahead of the `COPY`.
    private let eventsPerFile: Int
    public static let defaultEventsPerFile = 500_000
    /// Projection rows a projecting thread holds before it adds them to the sum, and rows
    /// written at a time.
    private let rowsPerWrite: Int
    /// Distinct projection rows the sum holds in memory (`RebuildSum`).
    private let rowsInMemory: Int
    /// About 48 MiB: a row is 0.37 KiB (a key and its measures), and under three quarters of
    /// 2^17 rows the dictionary holding them keeps 2^17 buckets.
    public static let defaultRowsInMemory = 96_000
    static let projectionTables = ["ad_state", "client_minutes", "projection_inbox"]
        + ProjectionTable.allCases.flatMap { table in ProjectionGrain.allCases.map { table.tableName($0) } }
        + ["projection_state"]

    public init(pool: ConnectionPool, attributionWindow: Duration = AdContribution.defaultAttributionWindow,
                eventsPerFile: Int = Rebuild.defaultEventsPerFile, rowsPerWrite: Int = Projector.defaultRowsPerWrite,
                rowsInMemory: Int = Rebuild.defaultRowsInMemory, logger: Logger) {
        self.pool = pool
        self.eventsPerFile = max(1, eventsPerFile)
        self.rowsPerWrite = max(1, rowsPerWrite)
        self.rowsInMemory = max(1, rowsInMemory)
        self.attributionWindow = attributionWindow
        self.logger = logger
    }

    /// Returns the number of log events the rebuilt projections cover.
    ///
    /// Refuses when retention has dropped days of the log (their report rows would be lost)
    /// unless `discardingDroppedDays` is true.
    @discardableResult
    public func run(discardingDroppedDays: Bool = false,
                    progress: @escaping @Sendable (RebuildProgress) -> Void = { _ in }) async throws -> Int {
        let (window, eventsPerFile, started, conninfo) = (attributionWindow, eventsPerFile, ContinuousClock.now, pool.conninfo)
        let (rowsPerWrite, rowsInMemory) = (self.rowsPerWrite, self.rowsInMemory)
        return try await pool.withConnection { c in
            let phases = RebuildPhases(c: c, layout: try LogLayout.of(c, conninfo: conninfo), window: window,
                                       eventsPerFile: eventsPerFile, rowsPerWrite: rowsPerWrite, rowsInMemory: rowsInMemory,
                                       started: started, progress: progress)
            return try phases.run(discardingDroppedDays: discardingDroppedDays)
        }
    }
}

/// One rebuild on one connection, phase by phase (the phases `Rebuild` lists).
private struct RebuildPhases {
    let c: Connection
    let layout: LogLayout
    let window: Duration
    let eventsPerFile: Int
    /// Projection rows held before they are written, and rows the sum holds in memory (`RebuildSum`).
    let rowsPerWrite: Int
    let rowsInMemory: Int
    let started: ContinuousClock.Instant
    let progress: @Sendable (RebuildProgress) -> Void

    /// The tables built in `tracker_rebuild` and swapped in.
    var tables: [String] { Rebuild.projectionTables + (layout.citus != nil ? ["log_shards"] : []) }

    func report(_ phase: String, _ done: Int, _ total: Int) {
        progress(RebuildProgress(phase: phase, done: done, total: total, elapsed: ContinuousClock.now - started))
    }

    func run(discardingDroppedDays: Bool) throws -> Int {
        // One rebuild at a time: a second one would drop the first's half-built schema.
        guard try c.tryLock(RebuildSQL.lock) else { throw ProjectorError.rebuildRunning }
        defer { try? c.unlock(RebuildSQL.lock) }
        if !discardingDroppedDays { try refuseDroppedDays() }
        // 1. The horizon. Transactions still open elsewhere may end (for up to 10 s) so that it
        // covers every event committed before the rebuild began: the bulk phases then copy
        // them and the progress shows them, instead of the catch-up picking them up unseen.
        let head = try LogCursor.head(on: c, layout: layout)
        let horizons = try Horizons(layout, head: head, on: c)
        try makeSchema()
        let labels = try RebuildLabels(layout: layout, horizon: horizons.single, on: c)
        // The rebuilt tables are not live until the swap, whose commit is durable.
        try c.execute("SET synchronous_commit = off")
        try c.execute("SET maintenance_work_mem = '512MB'")
        defer { try? c.execute("RESET synchronous_commit; RESET maintenance_work_mem") }
        let buckets = try copyLog(below: horizons, labels: labels)
        let (sum, read) = try projectAds(buckets, labels: labels)
        try writeProjections(sum, buckets: buckets, horizons: horizons, labels: labels)
        try index(read: read, projected: buckets.eventsSpilled)
        let caughtUp = try catchUpAndSwap(to: head, read: read, projected: buckets.eventsSpilled)
        report("done", buckets.rowsRead, buckets.rowsRead)
        return buckets.rowsRead + caughtUp
    }

    func refuseDroppedDays() throws {
        let dropped = try c.query(RebuildSQL.droppedDays)
        if let count = dropped.int64(0, 0), count > 0 {
            throw ProjectorError.logTruncated(days: Int(count), first: dropped.string(0, 1) ?? "?", last: dropped.string(0, 2) ?? "?")
        }
    }

    /// A fresh schema shaped like the live projections, with their storage options and grants.
    func makeSchema() throws {
        try c.execute("DROP SCHEMA IF EXISTS tracker_rebuild CASCADE")
        try c.execute("CREATE SCHEMA tracker_rebuild")
        for table in tables {
            // ad_state gets its primary key after the bulk copy: building it once is far cheaper.
            let indexes = table == "ad_state" ? " EXCLUDING INDEXES" : ""
            try c.execute("CREATE TABLE tracker_rebuild.\(table) (LIKE public.\(table) INCLUDING ALL\(indexes))")
            if table == "ad_state", layout.citus != nil {
                // On the shards of the log, each ad's state beside its events.
                try c.query(RebuildSQL.distributeAdState)
            }
            // LIKE copies no storage parameters (ad_state's fillfactor).
            if let options = try c.query(RebuildSQL.storageOptions, ["public.\(table)"]).string(0, 0), !options.isEmpty {
                try c.execute("ALTER TABLE tracker_rebuild.\(table) SET (\(options))")
            }
            // Nor grants: the roles that read and write projections (sql/008_roles.sql), and
            // any an operator added, keep theirs on the tables swapped in.
            for grant in try c.query(RebuildSQL.grants, ["public.\(table)"]).rows.compactMap({ $0.first ?? nil }) {
                try c.execute(grant)
            }
        }
    }

    /// 2. "copying": the log below the horizon, partition by partition (or shard by shard, on
    /// Citus, where the coordinator's partitions are empty), into spill files by ad, each
    /// event labelled on the way.
    func copyLog(below horizons: Horizons, labels: RebuildLabels) throws -> RebuildBuckets {
        // The planner's row estimates, for the progress bar only; the rows read are counted.
        let estimate = Int(try c.query(RebuildSQL.estimatedEvents).int64(0, 0) ?? 0)
        let buckets = try RebuildBuckets(expectedEvents: estimate, eventsPerBucket: eventsPerFile, labelOf: labels.label)
        report("copying", 0, estimate)
        guard let horizon = UInt64(horizons.single) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "snapshot xmin is not a number: \(horizons.single)")
        }
        var lastReport = ContinuousClock.now
        func copy(_ sql: String, on connection: Connection) throws {
            var stream = RebuildBuckets.CopyStream()
            try connection.copyOut(sql) { message in
                try buckets.spill(message, &stream)
                if buckets.rowsRead & 0xFFFF == 0, ContinuousClock.now - lastReport > .milliseconds(200) {
                    lastReport = ContinuousClock.now
                    report("copying", buckets.rowsRead, max(estimate, buckets.rowsRead))
                }
            }
        }
        for partition in try layout.citus != nil ? [] : logPartitions() {
            try copy(RebuildSQL.copyLog(from: "public.\(partition)", below: horizon), on: c)
        }
        if let log = layout.citus {
            for shard in horizons.shards {
                try log.withWorker(shard.node) { worker in
                    try copy(CitusSQL.copy(shard, below: horizons.below(shard)), on: worker)
                }
            }
        }
        try buckets.finishSpilling()
        report("copying", buckets.rowsRead, buckets.rowsRead)
        return buckets
    }

    /// The log's daily partitions; names that are not ours (events_YYYYMMDD) are not read.
    func logPartitions() throws -> [String] {
        try c.query(RebuildSQL.partitions).rows.compactMap { $0.first ?? nil }
            .filter { $0.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F } }
    }

    /// 3. "projecting": every ad's contribution and packed state, the spill files projected on
    /// every core (`RebuildPipeline`) and sent in order into the new `ad_state` by one binary
    /// `COPY`. Returns the contributions' sum (in memory up to `rowsInMemory` rows, the rest
    /// spilled) and the events projected.
    func projectAds(_ buckets: RebuildBuckets, labels: RebuildLabels) throws -> (RebuildSum, Int) {
        let sum = try RebuildSum(directory: buckets.directory, rowsInMemory: rowsInMemory)
        let pipeline = RebuildPipeline(buckets: buckets,
                                       rules: AdContribution(attributionWindow: window, maxClicksPerAd: labels.labeller.rules.maxClicksPerAd),
                                       sum: sum, rowsPerWrite: rowsPerWrite)
        var (done, bucket, failure, sentHeader, finished) = (0, 0, (any Error)?.none, false, false)
        report("projecting", 0, buckets.eventsSpilled)
        // The COPY's header, each spill file's rows in order, its trailer.
        let chunks = AnyIterator<[UInt8]> {
            if finished { return nil }
            if !sentHeader {
                sentHeader = true
                return BinaryCopyRows.header
            }
            guard bucket < buckets.count else {
                finished = true
                return BinaryCopyRows.trailer
            }
            switch pipeline.take(bucket) {
            case .success(let file):
                done += file.events
                bucket += 1
                report("projecting", done, buckets.eventsSpilled)
                return file.rows
            case .failure(let error):
                (failure, finished) = (error, true)
                return nil  // ends the COPY early; the error is rethrown below
            }
        }
        do {
            // Past the COPY, ended early or not, nothing is taken: the threads stop before
            // the indexing and the swap.
            defer { pipeline.stop() }
            try c.copyIn("COPY tracker_rebuild.ad_state (request_id, events) FROM STDIN (FORMAT binary)", chunks: IteratorSequence(chunks))
        }
        if let failure { throw failure }
        return (sum, done)
    }

    /// The day and half-day tables, the projector's state at the horizon, and the `high_rate`
    /// groups that may still take events (so the projector goes on counting them).
    func writeProjections(_ sum: RebuildSum, buckets: RebuildBuckets, horizons: Horizons, labels: RebuildLabels) throws {
        try c.transaction {
            // The copy ran without waiting for WAL flushes; the swap, which makes it live, does.
            try c.execute("SET LOCAL synchronous_commit = on")
            try c.execute("SET LOCAL search_path = tracker_rebuild, public")
            try sum.write(rowsPerWrite: rowsPerWrite) { part in try ProjectionWriter.apply(part, on: c) }
            try c.query(RebuildSQL.initialState, [horizons.single, String(buckets.rowsRead), String(window.microseconds),
                                                  String(labels.labeller.version)])
            if layout.citus != nil { try horizons.storeShardCheckpoints(on: c) }
            guard let limit = labels.labeller.rules.maxEventsPerClientMinute, let newest = buckets.newestReceipt else { return }
            var since = BinaryArray(.timestamptz, capacity: 1)
            since.append(microsecondsSince1970: (newest.microseconds / ClientGroup.microsecondsPerMinute - ClientMinutes.keptMinutes)
                             * ClientGroup.microsecondsPerMinute)
            if let log = layout.citus {
                try horizons.openGroups(of: log, limit: limit, since: since, on: c)
            } else {
                try c.query(RebuildSQL.openGroups, [.text(horizons.single), .text(String(limit)), since.parameter])
            }
        }
    }

    /// 4. "indexing": the key the incremental projector finds an ad's state by, and statistics
    /// for every new table (without them the planner guesses the projection tables' sizes
    /// until autovacuum comes by, and plans the reports' and the projector's reads on those guesses).
    func index(read: Int, projected: Int) throws {
        report("indexing", read, projected)
        try c.execute("ALTER TABLE tracker_rebuild.ad_state ADD PRIMARY KEY (request_id)")
        try c.execute("ANALYZE " + tables.map { "tracker_rebuild.\($0)" }.joined(separator: ", "))
    }

    /// 5. Catch up with what arrived meanwhile, in the new schema, at least to `head` (every
    /// event committed before the rebuild started, even one an open transaction elsewhere kept
    /// below the horizon's reach until now); 6. the last events and the swap, atomically,
    /// while live projectors wait on the lock. Returns the events caught up.
    ///
    /// Each step and the swap are transactions of their own, so one that the server cancels as
    /// a deadlock (the swap's DDL meets the live projectors' and readers' locks on the shards,
    /// which Citus's detector may cancel on either side) is rolled back whole and run again.
    func catchUpAndSwap(to head: LogHead?, read: Int, projected: Int) throws -> Int {
        var attempt = 1
        while true {
            do {
                return try catchUpAndSwapOnce(to: head, read: read, projected: projected)
            } catch let error as DatabaseError where error.state == .deadlockDetected && attempt < Self.deadlockAttempts {
                attempt += 1
                try c.sleep(for: .milliseconds(200))
            }
        }
    }

    /// How often `catchUpAndSwap` runs before a deadlock fails the rebuild.
    static let deadlockAttempts = 5

    private func catchUpAndSwapOnce(to head: LogHead?, read: Int, projected: Int) throws -> Int {
        report("catch-up+swap", read, projected)
        let labellers = LabellerCache()
        let limits = Projector.StepLimits(events: Projector.defaultBatchSize, rowsPerWrite: rowsPerWrite)
        let caughtUp = try Projector.catchUp(on: c, layout: layout, to: head, window: window, limit: limits,
                                             pause: .milliseconds(50), labellers: labellers, searchPath: "tracker_rebuild, public")
        try c.transaction {
            try c.execute("SET LOCAL search_path = tracker_rebuild, public")
            while try Projector.step(on: c, layout: layout, window: window, limit: limits, labellers: labellers).consumed > 0 {}
            try c.execute("SET LOCAL search_path = public")
            try c.execute("DROP SCHEMA IF EXISTS tracker_retired CASCADE")
            try c.execute("CREATE SCHEMA tracker_retired")
            for table in tables {
                try c.execute("ALTER TABLE public.\(table) SET SCHEMA tracker_retired")
                try c.execute("ALTER TABLE tracker_rebuild.\(table) SET SCHEMA public")
            }
            try c.execute("DROP SCHEMA tracker_retired CASCADE")
            try c.execute("DROP SCHEMA tracker_rebuild")
        }
        return caughtUp
    }
}

/// How a rebuild labels the log: the newest invalid-traffic rule set applied to the whole of
/// it, with the declared bots among every stored user agent and the `high_rate` groups of the
/// log below the horizon known before the first event is read.
struct RebuildLabels: Sendable {
    let labeller: IVTLabeller
    let declaredBots: [Int32: DeclaredBot]
    let highRate: Set<ClientGroup>

    init(layout: LogLayout, horizon: String, on c: Connection) throws {
        let ruleSet = try IVTRuleSets.load(version: nil, on: c)
        do {
            labeller = try IVTLabeller(version: ruleSet.version, rules: ruleSet.ruleSet)
        } catch {
            throw ProjectorError.unreadableRuleSet(version: ruleSet.version, reason: "\(error)")
        }
        declaredBots = try labeller.declaredBots(on: c)
        var highRate = Set<ClientGroup>()
        if let limit = labeller.rules.maxEventsPerClientMinute {
            // On Citus each worker has its own horizon, which no one statement can apply: the
            // groups are counted over the whole log. An event counted here but above a
            // horizon is projected by the catch-up into a group already over the limit,
            // which is where the incremental projector puts it too.
            let groups = try layout.citus != nil
                ? c.query(RebuildSQL.highRateGroups(belowHorizon: false), [.text(String(limit))], binaryResults: true)
                : c.query(RebuildSQL.highRateGroups(belowHorizon: true), [.text(String(limit)), .text(horizon)], binaryResults: true)
            for row in 0..<groups.rowCount {
                guard let minute = ByteReader.int64(groups.bytes(row, 0)), let agent = ByteReader.int32(groups.bytes(row, 1)) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "rebuild: an unreadable high_rate group")
                }
                highRate.insert(ClientGroup(minute: minute, userAgent: agent, address: Array(groups.bytes(row, 2))))
            }
        }
        self.highRate = highRate
    }

    /// A log row's label, by the rule the incremental projector follows (`IVTLabel.of`).
    func label(_ row: AdEventRow) -> IVTLabel? {
        let client = labeller.label(userAgent: row.userAgentId, address: row.clientAddress, channel: row.channel, declaredBots: declaredBots)
        // Without groups over the limit no row needs its group (an allocation per row otherwise).
        guard !highRate.isEmpty else { return client }
        return IVTLabel.of(client: client,
                           group: ClientGroup(receivedAt: row.receivedAt, userAgent: row.userAgentId, address: row.clientIP.map(Array.init)),
                           overLimit: highRate.contains)
    }
}

enum RebuildSQL {
    /// The advisory lock that keeps rebuilds one at a time.
    static let lock = "tracker.rebuild"

    /// The log's partitions, by name.
    static let partitions = """
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'public.events'::regclass ORDER BY c.relname
        """

    /// Days retention dropped from the log (`tracker retention`): a rebuild cannot reproduce them.
    static let droppedDays = "SELECT count(*), min(day)::text, max(day)::text FROM retention_runs"

    /// Every final event of one partition, the columns `RebuildBuckets.spill` reads (the table name
    /// comes from pg_class, the horizon is a number).
    static func copyLog(from table: String, below horizon: UInt64) -> String {
        """
        COPY (SELECT \(AdEventColumn.list)
              FROM \(table) WHERE tx < '\(horizon)'::xid8) TO STDOUT (FORMAT binary)
        """
    }

    /// The rebuilt `ad_state` on the shards of the log (Citus layout).
    static let distributeAdState = """
        SELECT create_distributed_table('tracker_rebuild.ad_state', 'request_id', colocate_with => 'public.events')
        """

    /// The log's size as the planner estimates it, or from its bytes (about 200 per event) for a
    /// partition not analysed yet: it sizes the spill files and the first progress bar.
    static let estimatedEvents = """
        SELECT COALESCE(sum(GREATEST(c.reltuples, pg_relation_size(c.oid) / 200)), 0)::bigint
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'public.events'::regclass
        """

    /// A table's storage parameters (`fillfactor=90`), comma-separated, or NULL.
    static let storageOptions = "SELECT array_to_string(reloptions, ', ') FROM pg_class WHERE oid = $1::regclass"

    /// The GRANT statements that give the rebuilt copy of table $1 what other roles hold on it.
    static let grants = """
        SELECT format('GRANT %s ON tracker_rebuild.%I TO %s', a.privilege_type, c.relname,
                      CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END)
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = $1::regclass AND a.grantee <> c.relowner
        """

    /// Checkpoint just below the horizon: everything with tx < H is in, nothing at or above it.
    static let initialState = """
        INSERT INTO projection_state (checkpoint_tx, checkpoint_seq, events_projected, attribution_window, ivt_rules)
        VALUES ((($1::text)::numeric - 1)::text::xid8, 9223372036854775807, $2::bigint,
                make_interval(secs => $3::bigint / 1000000.0), $4::int)
        """

    /// The groups of the log with more than $1 events (binary: minute as minutes since 1970,
    /// user agent, address): every event of them is `high_rate`. `belowHorizon`: only the rows
    /// below horizon $2; without it every row (the Citus layout, which has no one horizon).
    static func highRateGroups(belowHorizon: Bool) -> String {
        """
        SELECT (extract(epoch FROM date_trunc('minute', received_at)) / 60)::bigint, user_agent_id, client_ip
        FROM public.events
        WHERE \(belowHorizon ? "tx < $2::xid8 AND " : "")user_agent_id IS NOT NULL AND client_ip IS NOT NULL
        GROUP BY 1, 2, 3
        HAVING count(*) > $1::int
        """
    }

    /// The groups of minutes from $3 on (those that may still take events) with their counts,
    /// and their members while they hold no more than $2 (`ClientMinutes`' layout).
    static let openGroups = """
        INSERT INTO client_minutes (minute, user_agent_id, client_ip, events, members)
        SELECT date_trunc('minute', received_at), user_agent_id, client_ip, count(*),
               CASE WHEN count(*) > $2::int THEN NULL
                    ELSE string_agg(\(ClientMinutesSQL.membersOfRow), ''::bytea)
               END
        FROM public.events
        WHERE tx < $1::xid8 AND received_at >= ($3::timestamptz[])[1]
          AND user_agent_id IS NOT NULL AND client_ip IS NOT NULL
        GROUP BY 1, 2, 3
        """
}

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
/// 2. copy those events' projected fields into `tracker_rebuild.ad_events` inside PostgreSQL;
/// 3. read them back ordered by ad and sum every ad's contribution (the same pure function
///    the incremental projector uses) into the new day tables;
/// 4. catch up from H with the incremental projector, pointed at the new schema, at least to
///    the newest event committed when the rebuild began;
/// 5. under the projector lock, project the last events and swap the schemas in one transaction.
public struct Rebuild: Sendable {
    private let pool: ConnectionPool
    private let attributionWindow: Duration
    private let logger: Logger
    static let projectionTables = ["ad_events", "format_day", "asset_day", "source_day", "projection_state"]
    static let fetchSize = 50_000

    public init(pool: ConnectionPool, attributionWindow: Duration = .seconds(3600), logger: Logger) {
        self.pool = pool
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
        let window = attributionWindow
        let started = ContinuousClock.now
        return try await pool.withConnection { c in
            // One rebuild at a time: a second one would drop the first's half-built schema.
            guard try c.query("SELECT pg_try_advisory_lock(hashtext('tracker.rebuild'))").bool(0, 0) == true else {
                throw ProjectorError.rebuildRunning
            }
            defer { _ = try? c.query("SELECT pg_advisory_unlock(hashtext('tracker.rebuild'))") }
            if !discardingDroppedDays {
                let dropped = try c.query(RebuildSQL.droppedDays)
                if let count = dropped.int64(0, 0), count > 0 {
                    throw ProjectorError.logTruncated(days: Int(count), first: dropped.string(0, 1) ?? "?",
                                                      last: dropped.string(0, 2) ?? "?")
                }
            }
            // 1. The horizon, and a fresh schema shaped like the live projections.
            let head = try Projector.head(on: c)
            // Let transactions still open elsewhere end (for up to 10 s) so the horizon covers
            // every event committed before the rebuild began: the bulk phases then copy them
            // and the progress shows them, instead of the catch-up picking them up unseen.
            if let head {
                for _ in 0..<200 {
                    let final = try c.query("SELECT $1::xid8 < pg_snapshot_xmin(pg_current_snapshot())", [head.tx]).bool(0, 0)
                    if final == true { break }
                    try c.query("SELECT pg_sleep(0.05)")
                }
            }
            let horizon = try c.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").string(0, 0) ?? "0"
            try c.execute("DROP SCHEMA IF EXISTS tracker_rebuild CASCADE")
            try c.execute("CREATE SCHEMA tracker_rebuild")
            for table in Self.projectionTables {
                // ad_events gets its index after the bulk copy: building it once is far cheaper.
                let indexes = table == "ad_events" ? " EXCLUDING INDEXES" : ""
                try c.execute("CREATE TABLE tracker_rebuild.\(table) (LIKE public.\(table) INCLUDING ALL\(indexes))")
            }
            let total = Int(try c.query("SELECT count(*) FROM events WHERE tx < $1::xid8", [horizon]).int64(0, 0) ?? 0)

            // 2. The per-ad copy of the log, one partition at a time so progress can be shown.
            let partitions = try c.query("""
                SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'public.events'::regclass ORDER BY c.relname
                """).rows.compactMap { $0.first ?? nil }
                // Partition names are ours (events_YYYYMMDD); anything else is not read.
                .filter { $0.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F } }
            var copied = 0
            progress(RebuildProgress(phase: "copying", done: 0, total: total, elapsed: ContinuousClock.now - started))
            // The rebuilt tables are not live until the swap, whose commit is durable.
            try c.execute("SET synchronous_commit = off")
            try c.execute("SET work_mem = '256MB'")
            try c.execute("SET maintenance_work_mem = '512MB'")
            defer { try? c.execute("RESET synchronous_commit; RESET work_mem; RESET maintenance_work_mem") }
            for partition in partitions {
                copied += try c.query(RebuildSQL.copyAdEvents(from: partition), [horizon]).affectedRows
                progress(RebuildProgress(phase: "copying", done: copied, total: total, elapsed: ContinuousClock.now - started))
            }

            try c.execute("ANALYZE tracker_rebuild.ad_events")

            // 3. Every ad's contribution, summed in memory (the day tables are small), then written.
            let rules = AdContribution(attributionWindow: window)
            var sum = Contribution()
            var read = 0
            try c.transaction {
                try c.execute(RebuildSQL.declareCursor)
                var currentAd: String?
                var events: [AdEvent] = []
                while true {
                    let rows = try c.query(RebuildSQL.fetch)
                    if rows.rowCount == 0 { break }
                    for r in 0..<rows.rowCount {
                        guard let ad = rows.string(r, 0), let event = ProjectorSQL.adEvent(rows, r) else { continue }
                        if ad != currentAd {
                            if !events.isEmpty { rules.accumulate(events, into: &sum) }
                            events.removeAll(keepingCapacity: true)
                            currentAd = ad
                        }
                        events.append(event)
                    }
                    read += rows.rowCount
                    progress(RebuildProgress(phase: "projecting", done: read, total: copied, elapsed: ContinuousClock.now - started))
                }
                if !events.isEmpty { rules.accumulate(events, into: &sum) }
                sum.removeZeros()
                try c.execute("SET LOCAL search_path = tracker_rebuild, public")
                try ProjectionWriter.apply(sum, on: c)
                try c.query(RebuildSQL.initialState, [horizon, String(total), String(window.microseconds)])
            }

            // The incremental projector finds an ad's events by this index from now on.
            progress(RebuildProgress(phase: "indexing", done: read, total: copied, elapsed: ContinuousClock.now - started))
            try c.execute("CREATE INDEX ad_events_by_ad ON tracker_rebuild.ad_events (request_id)")

            // 4. Catch up with what arrived meanwhile, in the new schema.
            progress(RebuildProgress(phase: "catch-up+swap", done: read, total: copied, elapsed: ContinuousClock.now - started))
            // Every event committed before the rebuild started is in before the swap, even one
            // that an open transaction elsewhere kept below the horizon's reach until now.
            let caughtUp = try Projector.catchUp(on: c, to: head, window: window, limit: 20_000,
                                                 pause: .milliseconds(50), searchPath: "tracker_rebuild, public")

            // 5. The last events and the swap, atomically, while live projectors wait on the lock.
            try c.transaction {
                try c.execute("SET LOCAL search_path = tracker_rebuild, public")
                while try Projector.step(on: c, window: window, limit: 20_000) > 0 {}
                try c.execute("SET LOCAL search_path = public")
                try c.execute("DROP SCHEMA IF EXISTS tracker_retired CASCADE")
                try c.execute("CREATE SCHEMA tracker_retired")
                for table in Self.projectionTables {
                    try c.execute("ALTER TABLE public.\(table) SET SCHEMA tracker_retired")
                    try c.execute("ALTER TABLE tracker_rebuild.\(table) SET SCHEMA public")
                }
                try c.execute("DROP SCHEMA tracker_retired CASCADE")
                try c.execute("DROP SCHEMA tracker_rebuild")
            }
            progress(RebuildProgress(phase: "done", done: total, total: total, elapsed: ContinuousClock.now - started))
            return total + caughtUp
        }
    }
}

enum RebuildSQL {
    /// Days retention dropped from the log (`tracker retention`): a rebuild cannot reproduce them.
    static let droppedDays = "SELECT count(*), min(day)::text, max(day)::text FROM retention_runs"

    /// The projected fields of one partition's final events (the table name comes from pg_class).
    static func copyAdEvents(from partition: String) -> String {
        """
        INSERT INTO tracker_rebuild.ad_events (request_id, id, type, corrected_at, ad_unit, format_id, asset_key,
                                               source, adapter, eea, reservation, is_test)
        SELECT request_id, id, type, corrected_at, ad_unit, format_id, asset_key, source, adapter, eea, reservation,
               test OR ad_unit IN ('/6499/example/native', '/6499/example/native-backfill',
                                   '/21775744923/example/native', '/21775744923/example/native-backfill')
        FROM public.\(partition)
        WHERE tx < $1::xid8 AND type NOT IN ('video_pause', 'video_mute', 'video_unmute')
        """
    }

    static let declareCursor = """
        DECLARE rebuild_ads NO SCROLL CURSOR FOR
        SELECT request_id, id::text, type::text, (extract(epoch FROM corrected_at) * 1000000)::bigint,
               ad_unit, format_id, asset_key, source::text, adapter, eea, reservation, is_test
        FROM tracker_rebuild.ad_events
        ORDER BY request_id
        """

    static let fetch = "FETCH \(Rebuild.fetchSize) FROM rebuild_ads"

    /// Checkpoint just below the horizon: everything with tx < H is in, nothing at or above it.
    static let initialState = """
        INSERT INTO projection_state (checkpoint_tx, checkpoint_seq, events_projected, attribution_window)
        VALUES ((($1::text)::numeric - 1)::text::xid8, 9223372036854775807, $2::bigint,
                make_interval(secs => $3::bigint / 1000000.0))
        """
}

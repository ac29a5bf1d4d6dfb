import Logging
import ServiceLifecycle

/// What retention did, or would do, with one daily partition of the log.
public struct RetentionDecision: Sendable, Hashable {
    public enum Action: Sendable, Hashable {
        /// Dropped: its events left the log and their ids left `event_ids`.
        case dropped(idsForgotten: Int)
        /// Would be dropped (dry run).
        case wouldDrop
        /// Old enough, but kept: it holds events the projector has not read yet.
        case keptUnprojected(pending: Int)
        /// Old enough, but kept this time: the log was busy for longer than the lock timeout.
        case keptBusy
    }

    /// The partition, `events_YYYYMMDD`.
    public var partition: String
    /// Its UTC day, `YYYY-MM-DD`.
    public var day: String
    /// Events it held.
    public var events: Int
    public var action: Action
}

/// Why retention could not run.
public enum RetentionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `keepDays` must be at least 1: today's partition is always kept.
    case invalidKeepDays(Int)
    /// A table that is not a daily partition of the log (`events_YYYYMMDD`) was about to be dropped.
    case notADailyPartition(String)

    public var description: String {
        switch self {
        case .invalidKeepDays(let n): "keep-days must be at least 1 (today is always kept), got \(n)"
        case .notADailyPartition(let name): "'\(name)' is not a daily partition of the log (events_YYYYMMDD); retention drops nothing else"
        }
    }
}

/// Drops whole daily partitions of the log that are older than the kept days.
///
/// A partition goes only when every event in it is at or behind the projection checkpoint,
/// so the projections (which are kept) already hold its counts. Its ids leave `event_ids`
/// in the same transaction: the log's idempotency horizon is the kept log, and a retry of an
/// event older than that is stored again (the projector still knows its id from `ad_events`
/// and does not count it twice). Each partition is dropped in its own
/// transaction, recorded in `retention_runs`.
public struct Retention: Sendable {
    private let pool: ConnectionPool
    private let logger: Logger

    public init(pool: ConnectionPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    /// Keeps today's partition and the `keepDays` UTC days before it (by `received_at`);
    /// drops older ones, oldest first. With `dryRun` nothing changes.
    public func run(keepDays: Int, dryRun: Bool) async throws -> [RetentionDecision] {
        guard keepDays >= 1 else { throw RetentionError.invalidKeepDays(keepDays) }
        let candidates = try await pool.withConnection { connection in
            let r = try connection.query(RetentionSQL.candidates, [String(keepDays)])
            return (0..<r.rowCount).compactMap { row -> (String, String)? in
                guard let name = r.string(row, 0), let day = r.string(row, 1) else { return nil }
                return (name, day)
            }
        }
        var decisions: [RetentionDecision] = []
        for (partition, day) in candidates {
            let decision: RetentionDecision
            do {
                decision = try await pool.withConnection { connection in
                    try connection.transaction {
                        try Self.retire(partition, day: day, keepDays: keepDays, dryRun: dryRun, on: connection)
                    }
                }
            } catch let error as DatabaseError where ["55P03", "40P01"].contains(error.sqlState) {
                // lock_not_available (the lock timeout above), deadlock_detected: try again later.
                decision = RetentionDecision(partition: partition, day: day, events: 0, action: .keptBusy)
            }
            logger.info("retention", metadata: [
                "tracker.partition": "\(partition)", "tracker.events": "\(decision.events)",
                "tracker.retention.action": "\(decision.action)",
            ])
            decisions.append(decision)
        }
        return decisions
    }

    /// Decides on one partition inside the caller's transaction and, unless `dryRun`, drops it.
    static func retire(_ partition: String, day: String, keepDays: Int, dryRun: Bool, on connection: Connection) throws -> RetentionDecision {
        // The name came from the catalog and matched ^events_[0-9]{8}$ (see `candidates`); it is
        // checked again here, and quoted, because DDL takes no parameters and it is spliced in below.
        // A refusal is an error for this run, never a trap of the whole server.
        guard RetentionSQL.isPartitionName(partition) else { throw RetentionError.notADailyPartition(partition) }
        let table = RetentionSQL.quotedIdentifier(partition)
        _ = try connection.query("SELECT pg_advisory_xact_lock(hashtext('tracker.event_partitions'))")
        if !dryRun {
            // No writer may add to the partition between the check and the drop. SHARE, not
            // ACCESS EXCLUSIVE: readers of the log (the projector) lock the parent and then every
            // partition, so holding the partition exclusively while waiting for the parent below
            // would deadlock with them. Readers pass; the exclusive locks come parent first.
            try connection.execute("LOCK TABLE \(table) IN SHARE MODE")
        }
        let counts = try connection.query(RetentionSQL.counts(table))
        let events = Int(counts.int64(0, 0) ?? 0)
        let pending = Int(counts.int64(0, 1) ?? 0)
        let checkpoint = counts.string(0, 2) ?? "0"
        if pending > 0 {
            return RetentionDecision(partition: partition, day: day, events: events, action: .keptUnprojected(pending: pending))
        }
        if dryRun {
            return RetentionDecision(partition: partition, day: day, events: events, action: .wouldDrop)
        }
        _ = try connection.query("SELECT set_config('tracker.retention', $1, true)", [partition])
        let forgotten = try connection.query("DELETE FROM event_ids WHERE id IN (SELECT id FROM \(table))").affectedRows
        // Dropping a partition locks the parent, which queues every writer behind it: give up
        // (and roll back) rather than stall ingestion behind a long reader.
        try connection.execute("SET LOCAL lock_timeout = '2s'")
        try connection.execute("LOCK TABLE ONLY events IN ACCESS EXCLUSIVE MODE")
        try connection.execute("DROP TABLE \(table)")
        _ = try connection.query(RetentionSQL.record, [day, partition, String(events), String(forgotten), String(keepDays), checkpoint])
        return RetentionDecision(partition: partition, day: day, events: events, action: .dropped(idsForgotten: forgotten))
    }
}

/// Runs retention inside `tracker serve` (TRACKER_RETENTION_DAYS): at start, then every `interval`.
///
/// Every node may run it: runs serialise on the partitions' advisory lock, and a partition
/// another node dropped is simply no longer listed. A run that failed or left an old
/// partition behind (busy log, events not yet projected) is retried after `retryDelay`,
/// doubling up to `interval`, so a passing lock conflict costs seconds, not an interval.
public struct RetentionService: Service {
    public let keepDays: Int
    public let interval: Duration
    public let retryDelay: Duration
    private let retention: Retention
    private let logger: Logger

    public init(pool: ConnectionPool, keepDays: Int, interval: Duration = .seconds(3600),
                retryDelay: Duration = .seconds(2), logger: Logger) {
        self.keepDays = keepDays
        self.interval = interval
        self.retryDelay = min(retryDelay, interval)
        self.retention = Retention(pool: pool, logger: logger)
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var delay = retryDelay
            while !Task.isCancelled {
                var finished = false
                do {
                    let decisions = try await retention.run(keepDays: keepDays, dryRun: false)
                    finished = decisions.allSatisfy(\.isFinal)
                } catch {
                    logger.warning("retention failed; retrying later", metadata: ["error": "\(String(reflecting: error))"])
                }
                if finished {
                    delay = retryDelay
                    try? await Task.sleep(for: interval)
                } else {
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, interval)
                }
            }
        }
    }
}

extension RetentionDecision {
    /// Nothing is left to do for this partition (until the next day ages out).
    var isFinal: Bool {
        switch action {
        case .dropped, .wouldDrop: true
        case .keptUnprojected, .keptBusy: false
        }
    }
}

enum RetentionSQL {
    /// `name` as a quoted SQL identifier (PostgreSQL's `quote_ident`: double quotes, inner ones doubled).
    static func quotedIdentifier(_ name: String) -> String {
        var quoted = "\""
        for character in name {
            if character == "\"" { quoted += "\"\"" } else { quoted.append(character) }
        }
        return quoted + "\""
    }

    static func isPartitionName(_ name: String) -> Bool {
        let digits = name.utf8.dropFirst(7)
        return name.utf8.count == 15 && name.hasPrefix("events_") && digits.allSatisfy { (48...57).contains($0) }
    }

    /// Daily partitions of `events` whose day is before today minus $1 days (UTC, database clock).
    static let candidates = """
        SELECT c.relname::text, to_char(to_date(substr(c.relname, 8), 'YYYYMMDD'), 'YYYY-MM-DD')
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'events'::regclass
          AND c.relname ~ '^events_[0-9]{8}$'
          AND to_date(substr(c.relname, 8), 'YYYYMMDD') < (now() AT TIME ZONE 'UTC')::date - $1::int
        ORDER BY c.relname
        """

    /// Events in the partition, how many of them are beyond the projection checkpoint, and the checkpoint.
    /// `partition` is already a quoted identifier.
    static func counts(_ partition: String) -> String {
        """
        SELECT (SELECT count(*) FROM \(partition)),
               (SELECT count(*) FROM \(partition) p, projection_state s
                 WHERE (p.tx, p.seq) > (s.checkpoint_tx, s.checkpoint_seq)),
               (SELECT checkpoint_tx::text FROM projection_state)
        """
    }

    static let record = """
        INSERT INTO retention_runs (day, partition_name, events, ids_forgotten, keep_days, checkpoint_tx)
        VALUES ($1::date, $2, $3::bigint, $4::bigint, $5::int, $6::xid8)
        """
}

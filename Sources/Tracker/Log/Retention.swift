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
            } catch let error as DatabaseError where [SQLState.lockNotAvailable, .deadlockDetected].contains(error.state) {
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
    ///
    /// The work is done by `tracker_retire_partition`, a function the owner of the log owns and
    /// runs (sql/008_roles.sql): the roles the tracker connects as may not drop tables or delete
    /// ids, and the function, not its caller, checks that the partition is old enough and
    /// wholly projected.
    static func retire(_ partition: String, day: String, keepDays: Int, dryRun: Bool, on connection: Connection) throws -> RetentionDecision {
        // The name came from the catalog and matched ^events_[0-9]{8}$ (see `candidates`); the
        // function checks it again. A refusal is an error for this run, never a trap of the server.
        guard RetentionSQL.isPartitionName(partition) else { throw RetentionError.notADailyPartition(partition) }
        let r = try connection.query(RetentionSQL.retire, [partition, String(keepDays), dryRun ? "true" : "false"])
        let events = Int(r.int64(0, 0) ?? 0)
        let pending = Int(r.int64(0, 1) ?? 0)
        if pending > 0 {
            return RetentionDecision(partition: partition, day: day, events: events, action: .keptUnprojected(pending: pending))
        }
        if r.bool(0, 3) == true {
            return RetentionDecision(partition: partition, day: day, events: events, action: .dropped(idsForgotten: Int(r.int64(0, 2) ?? 0)))
        }
        return RetentionDecision(partition: partition, day: day, events: events, action: .wouldDrop)
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
                    logger.warning("retention failed; retrying later", metadata: ["tracker.error": "\(String(reflecting: error))"])
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

    /// Checks and (unless dry run) drops one partition: events, events not yet projected, ids
    /// forgotten, dropped.
    static let retire = "SELECT logged, unprojected, forgotten, dropped FROM tracker_retire_partition($1, $2::int, $3::bool)"
}

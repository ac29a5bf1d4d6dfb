import Logging

/// The tables that hold one row per entity of the log (an ad; a load, whose events carry its id
/// as their `request_id`), keyed by the log's distribution column. On Citus each lives on the
/// shards beside its entity's events, so a projector step folds an entity's events into its
/// state on one node. A new per-entity table goes here: it is then distributed with the log.
enum EntityStateTable: String, CaseIterable, Sendable {
    case adState = "ad_state"
}

/// One step of spreading the log over a Citus cluster. Each is done once; whether it is done is
/// read from Citus's catalog (`DistributionFacts`), so a run that was interrupted continues
/// where it stopped when `tracker migrate` runs again.
public enum DistributionStep: String, CaseIterable, Sendable, CustomStringConvertible {
    /// `events.request_id` compared by bytes ("C"), as `ad_state`'s key: colocated tables must
    /// agree on the distribution column's collation. A brief exclusive lock, no rewrite.
    case collation = "request-id-collation"
    /// `user_agents` on every node, joined with the log's `user_agent_id` there.
    case userAgents = "user-agents"
    /// The log onto the shards; a log that holds events with Citus's concurrent form, which lets
    /// appends go on (it blocks only DDL, so partition maintenance waits).
    case events = "events"
    /// `event_ids` onto the shards, by the id itself (the concurrent form too).
    case eventIds = "event-ids"
    /// Under the projector's lock, in one transaction: the per-entity state tables beside their
    /// events, the checkpoints per shard (from the projections' own), retention on shards.
    case layout = "layout"

    public var description: String { rawValue }
}

/// How many of the log's partitions a distribution of a log that holds events copies at once.
/// Citus splits each partition into every shard with a connection per shard on the worker that
/// takes it, and runs `citus.max_adaptive_executor_pool_size` (16) such copies at once, more
/// connections than a worker at PostgreSQL's defaults allows (docs/SCALING.md, "Citus"). The
/// copies take the connections the fullest worker has free, less `servingHeadroom` for what the
/// trackers write and read meanwhile.
struct CopyParallelism: Equatable, Sendable {
    /// Citus's default for `citus.max_adaptive_executor_pool_size`: the most copies at once.
    static let citusDefault = 16
    /// Connections a worker keeps for the appends and reads served while the log is copied.
    static let servingHeadroom = 10

    /// The shards the busiest worker takes.
    let shardsPerWorker: Int
    /// Partitions copied at once; 0 when the worker cannot take a single copy.
    let copies: Int
    /// The free connections a worker needs for one copy.
    var leastFree: Int { shardsPerWorker + Self.servingHeadroom }

    init(shardCount: Int, workers: Int, freeConnections: Int) {
        let workers = max(workers, 1)
        shardsPerWorker = max(1, (shardCount + workers - 1) / workers)
        copies = min(Self.citusDefault, max(0, freeConnections - Self.servingHeadroom) / shardsPerWorker)
    }

    /// What one node's free background workers and connections allow: the partitions it takes
    /// at once, or `nil` for a node that takes no shards (the copy opens no connection there:
    /// only that it answered counts). `concurrent` is a copy of a log that holds events, which
    /// needs logical replication's background workers and a copy's connections; throws naming
    /// the node and the setting when it cannot take one.
    static func check(node: String, takesShards: Bool, freeWorkers: Int, freeConnections: Int, shardCount: Int, shardNodes: Int,
                      concurrent: Bool) throws(DistributionError) -> Int? {
        guard takesShards else { return nil }
        if concurrent && freeWorkers < 2 {
            throw DistributionError.setting(node: node, name: "max_worker_processes", has: "\(freeWorkers) free background workers",
                                            needs: "at least 2 free, for the logical replication that copies the log (raise max_worker_processes and restart)")
        }
        let plan = CopyParallelism(shardCount: shardCount, workers: shardNodes, freeConnections: freeConnections)
        if concurrent && plan.copies < 1 {
            throw DistributionError.setting(node: node, name: "max_connections", has: "\(freeConnections) connections free",
                                            needs: "at least \(plan.leastFree) free: the copy writes each partition into the node's \(plan.shardsPerWorker) shards at once, a connection each, beside the traffic served meanwhile (raise max_connections and restart)")
        }
        return max(plan.copies, 1)
    }
}

/// What Citus's catalog says about a distribution, read before each run.
struct DistributionFacts: Sendable, Equatable {
    var requestIdCollatedC: Bool
    var userAgentsReference: Bool
    var eventsDistributed: Bool
    var eventIdsDistributed: Bool
    /// `log_shards` exists: the last step committed.
    var layoutMade: Bool

    /// The steps still to do, in order. The last step's transaction makes `layoutMade` true, so a
    /// layout exists only over a log whose every earlier step is done.
    var remaining: [DistributionStep] {
        guard !layoutMade else { return [] }
        let done: [DistributionStep: Bool] = [.collation: requestIdCollatedC, .userAgents: userAgentsReference,
                                              .events: eventsDistributed, .eventIds: eventIdsDistributed, .layout: false]
        return DistributionStep.allCases.filter { done[$0] != true }
    }
}

/// Why a distribution did not run or stopped: a node or a setting, named, and what was done.
public enum DistributionError: Error, Sendable, CustomStringConvertible {
    /// A worker did not answer: nothing was changed.
    case unreachable(node: String, reason: String)
    /// A setting a node needs for this distribution: nothing was changed.
    case setting(node: String, name: String, has: String, needs: String)
    /// A step failed; `done` were done (now or before), `remaining` were not.
    case stepFailed(step: DistributionStep, done: [DistributionStep], remaining: [DistributionStep], reason: String)
    /// A rebuild holds the projections: the last step waits for it.
    case rebuildRunning

    public var description: String {
        switch self {
        case .unreachable(let node, let reason):
            "the Citus worker \(node) does not answer (\(reason)); nothing was changed: start it or remove it (citus_remove_node), then run tracker migrate again"
        case .setting(let node, let name, let has, let needs):
            "\(name) is \(has.isEmpty ? "unset" : "'\(has)'") on \(node), distributing a log that holds events needs \(needs) (docs/OPERATIONS.md, \"On Citus\"); nothing was changed"
        case .stepFailed(let step, let done, let remaining, let reason):
            "distributing the log stopped at step '\(step)' (\(reason)); done: \(done.isEmpty ? "none" : done.map(\.rawValue).joined(separator: ", ")); still to do: \(remaining.map(\.rawValue).joined(separator: ", ")). The database serves as it is: run tracker migrate again to finish"
        case .rebuildRunning:
            "a tracker rebuild is running; distributing the log waits for it: run tracker migrate again when it has finished"
        }
    }
}

/// Spreads the log of a database with the citus extension over its workers, empty or not, in
/// `DistributionStep`s; and takes a log distributed by an older tracker (rows stamped by their
/// workers) over to the coordinator's order.
struct CitusDistribution {
    let connection: Connection
    let logger: Logger
    /// Told each step as it is done (`tracker migrate` prints them).
    let report: @Sendable (String) -> Void

    /// Distributes the log when the database has the extension, workers, and a log not yet
    /// distributed; converts an older layout. Returns whether it changed the layout.
    func run() throws -> Bool {
        let state = try connection.query(Self.state)
        guard state.bool(0, 0) == true else { return false }
        if state.bool(0, 1) == true {
            guard state.bool(0, 2) == true else { return false }
            try convertWorkerStamps()
            return true
        }
        let workers = try workerNodes()
        guard !workers.isEmpty else {
            logger.warning("the citus extension is installed but no worker takes shards: the log stays on the coordinator; add workers (citus_add_node) and run tracker migrate again")
            return false
        }
        let facts = try self.facts()
        let remaining = facts.remaining
        guard !remaining.isEmpty else { return false }
        let populated = try connection.query(Self.populated).bool(0, 0) ?? true
        let copies = try preflight(workers: workers, concurrent: populated)
        var done = DistributionStep.allCases.filter { !remaining.contains($0) }
        if !done.isEmpty { report("resuming the distribution: already done \(done.map(\.rawValue).joined(separator: ", "))") }
        for step in remaining {
            let started = ContinuousClock.now
            do {
                try run(step, populated: populated, copies: copies)
            } catch let error as DistributionError {
                throw error
            } catch {
                // The operator runs this command: the server's own words say what to mend.
                let reason = (error as? DatabaseError)?.debugDescription ?? "\(error)"
                throw DistributionError.stepFailed(step: step, done: done, remaining: Array(remaining.drop(while: { $0 != step })),
                                                   reason: reason)
            }
            done.append(step)
            let tenths = (ContinuousClock.now - started) / .milliseconds(100)
            report("distribution step \(step) done (\(Int(tenths) / 10).\(Int(tenths) % 10) s)")
        }
        logger.info("distributed the log over the Citus cluster", metadata: ["tracker.citus.workers": "\(workers.count)"])
        return true
    }

    private func facts() throws -> DistributionFacts {
        let r = try connection.query(Self.facts)
        return DistributionFacts(requestIdCollatedC: r.bool(0, 0) ?? false, userAgentsReference: r.bool(0, 1) ?? false,
                                 eventsDistributed: r.bool(0, 2) ?? false, eventIdsDistributed: r.bool(0, 3) ?? false,
                                 layoutMade: r.bool(0, 4) ?? false)
    }

    private func workerNodes() throws -> [WorkerNode] {
        try connection.query(Self.workers).rows.compactMap { row in
            guard row.count == 2, let host = row[0], let port = row[1].flatMap(Int.init) else { return nil }
            return WorkerNode(host: host, port: port)
        }
    }

    /// Every worker answers, and the settings this distribution needs hold; changes nothing.
    /// Returns how many partitions the copy may split at once (`CopyParallelism`).
    private func preflight(workers: [WorkerNode], concurrent: Bool) throws -> Int {
        let answers = try connection.query(Self.workerSettings)
        let own = try connection.query(Self.coordinatorSettings)
        let shardCount = Int(own.string(0, 4) ?? "") ?? 32
        var copies = CopyParallelism.citusDefault
        let shardNodes = Set(workers)
        var shardNodesAnswered = 0
        for row in 0..<answers.rowCount {
            let host = answers.string(row, 0) ?? "?", port = answers.string(row, 1) ?? "?"
            let node = "\(host):\(port)"
            guard answers.bool(row, 2) == true, let result = answers.string(row, 3) else {
                throw DistributionError.unreachable(node: node, reason: answers.string(row, 3) ?? "no answer")
            }
            let counts = result.split(separator: " ").map { Int($0) ?? 0 }
            let takesShards = shardNodes.contains(WorkerNode(host: host, port: Int(port) ?? -1))
            if takesShards { shardNodesAnswered += 1 }
            let nodeCopies = try CopyParallelism.check(node: node, takesShards: takesShards, freeWorkers: counts.first ?? 0,
                                                       freeConnections: counts.dropFirst().first ?? 0, shardCount: shardCount,
                                                       shardNodes: workers.count, concurrent: concurrent)
            copies = min(copies, nodeCopies ?? copies)
        }
        if shardNodesAnswered < workers.count {
            throw DistributionError.unreachable(node: workers.map(\.description).joined(separator: ", "), reason: "not all workers answered")
        }
        let node = "the coordinator"
        if own.string(0, 0) != "1" {
            throw DistributionError.setting(node: node, name: "citus.shard_replication_factor", has: own.string(0, 0) ?? "",
                                            needs: "1 (one placement per shard: each is read on one worker)")
        }
        guard concurrent else { return copies }
        if own.string(0, 1) != "logical" {
            throw DistributionError.setting(node: node, name: "wal_level", has: own.string(0, 1) ?? "", needs: "'logical' (set it and restart)")
        }
        if let plugins = own.string(0, 2), !plugins.split(separator: ",").contains(where: { String($0.filter { $0 != " " }) == "citus" }) {
            throw DistributionError.setting(node: node, name: "output_plugin_libraries", has: plugins,
                                            needs: "to list citus, e.g. 'pgoutput, test_decoding, citus' (set it and reload)")
        }
        if (Int(own.string(0, 3) ?? "") ?? 0) < workers.count {
            throw DistributionError.setting(node: node, name: "max_replication_slots", has: "\(own.string(0, 3) ?? "0") free",
                                            needs: "one free slot per worker (\(workers.count))")
        }
        return copies
    }

    private func run(_ step: DistributionStep, populated: Bool, copies: Int) throws {
        switch step {
        case .collation:
            try connection.transaction { try connection.execute(Self.collation) }
        case .userAgents:
            try connection.transaction {
                try connection.query(Self.userAgents)
                try connection.query("SELECT truncate_local_data_after_distributing_table('user_agents')")
            }
        case .events, .eventIds:
            let (table, column) = step == .events ? ("events", "request_id") : ("event_ids", "id")
            // The log's triggers touch only their own row (Citus calls triggers on distributed
            // tables unsafe because one that reached other shards would be).
            try connection.execute("SET citus.enable_unsafe_triggers = on")
            // Each partition copied at once holds a connection per shard on every worker.
            try connection.execute("SET citus.max_adaptive_executor_pool_size = \(copies)")
            defer {
                try? connection.execute("RESET citus.enable_unsafe_triggers")
                try? connection.execute("RESET citus.max_adaptive_executor_pool_size")
            }
            if populated {
                // Half-made shards of an interrupted run go first; the copy itself cannot run
                // inside a transaction block.
                try connection.execute("CALL citus_cleanup_orphaned_resources()")
                try connection.query("SELECT create_distributed_table_concurrently($1, $2)", [table, column])
            } else {
                try connection.query("SELECT create_distributed_table($1, $2)", [table, column])
            }
        case .layout:
            try connection.transaction {
                // Every projector step waits; a step that began before reads the old layout to
                // its end (LogLayout.refreshed).
                try connection.lockForTransaction(ProjectorSQL.lock)
                guard try connection.query(CitusSQL.lockAgainstRebuilds, [RebuildSQL.lock]).bool(0, 0) == true else {
                    throw DistributionError.rebuildRunning
                }
                // One connection per worker for the whole transaction: the copies of the state
                // tables and the function changes after them must share it.
                try connection.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
                for table in EntityStateTable.allCases {
                    try connection.query("SELECT create_distributed_table($1, 'request_id', colocate_with => 'events')", [table.rawValue])
                    try connection.query("SELECT truncate_local_data_after_distributing_table($1)", [table.rawValue])
                }
                // One statement at a time: Citus parses the query string again when it passes
                // some commands on to the workers, and refuses a string that holds several.
                for statement in Migration.citusLayout.statements + Migration.citusRetention.statements {
                    try connection.execute(statement)
                }
            }
        }
    }

    /// A log distributed by an older tracker, its rows stamped by their workers: from the next
    /// UTC day on the coordinator stamps them (`sql/citus/coordinator-order.sql`).
    private func convertWorkerStamps() throws {
        try connection.transaction {
            try connection.lockForTransaction(ProjectorSQL.lock)
            guard try connection.query(CitusSQL.lockAgainstRebuilds, [RebuildSQL.lock]).bool(0, 0) == true else {
                throw DistributionError.rebuildRunning
            }
            for statement in Migration.citusCoordinatorOrder.statements + Migration.citusRetention.statements {
                try connection.execute(statement)
            }
        }
        report("the log's order is the coordinator's from the next UTC day on (sql/citus/coordinator-order.sql)")
        logger.info("took the distributed log over to the coordinator's order")
    }

    /// Columns: 0 the citus extension is installed, 1 the log is distributed, 2 its rows are
    /// stamped by their workers (an older layout, not converted yet).
    static let state = """
        SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus'), to_regclass('log_shards') IS NOT NULL,
               to_regclass('log_order') IS NULL
               AND EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'events'::regclass AND tgname = 'events_log_order')
        """

    /// `DistributionFacts`, in its order.
    static let facts = """
        SELECT (SELECT c.collname = 'C' FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
                WHERE a.attrelid = 'events'::regclass AND a.attname = 'request_id'),
               EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'user_agents'::regclass AND repmodel = 't'),
               EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'events'::regclass AND partmethod = 'h'),
               EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'event_ids'::regclass AND partmethod = 'h'),
               to_regclass('log_shards') IS NOT NULL
        """

    /// Whether the log holds an event (the concurrent form, and its settings, are needed then).
    static let populated = "SELECT EXISTS (SELECT 1 FROM events)"

    /// Active nodes that take shards, other than the coordinator: host, port.
    static let workers = """
        SELECT nodename, nodeport FROM pg_dist_node
        WHERE isactive AND shouldhaveshards AND noderole = 'primary' AND groupid <> 0
        ORDER BY nodename, nodeport
        """

    /// Asks every worker, through the coordinator: 0-1 the node, 2 whether it answered, 3 its
    /// free background workers and its free connections, space-separated (or the error).
    /// Background workers are every backend that is not one of PostgreSQL's own processes; free
    /// connections are those a role without superuser's reserve may still open.
    static let workerSettings = """
        SELECT nodename, nodeport, success, result FROM run_command_on_workers($cmd$
            SELECT (current_setting('max_worker_processes')::int
                    - count(*) FILTER (WHERE backend_type NOT IN ('client backend', 'autovacuum launcher', 'autovacuum worker',
                                                                  'background writer', 'checkpointer', 'archiver', 'startup',
                                                                  'walreceiver', 'walsender', 'walwriter')))::text
                   || ' ' || (current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
                              - count(*) FILTER (WHERE backend_type = 'client backend'))::text
            FROM pg_stat_activity
            $cmd$)
        """

    /// Columns: 0 citus.shard_replication_factor, 1 wal_level, 2 output_plugin_libraries (NULL
    /// where PostgreSQL has no such setting), 3 free replication slots, 4 citus.shard_count.
    static let coordinatorSettings = """
        SELECT current_setting('citus.shard_replication_factor'), current_setting('wal_level'),
               current_setting('output_plugin_libraries', true),
               current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots),
               current_setting('citus.shard_count')
        """

    /// `events.request_id` to "C"; the ad_events view depends on the column, so it is made again
    /// around the change.
    static let collation = """
        DO $$
        DECLARE
            definition text := pg_get_viewdef('ad_events'::regclass);
        BEGIN
            DROP VIEW ad_events;
            ALTER TABLE events ALTER COLUMN request_id TYPE text COLLATE "C";
            EXECUTE 'CREATE VIEW ad_events AS ' || definition;
            GRANT SELECT ON ad_events TO tracker_projector, tracker_report;
        END
        $$
        """

    static let userAgents = "SELECT create_reference_table('user_agents')"
}

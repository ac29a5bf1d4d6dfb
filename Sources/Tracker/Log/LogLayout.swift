import Synchronization

/// Where the log's rows live: one table of this database, or the shards of a Citus cluster
/// (`sql/citus/distribute.sql`), each with its own order and checkpoint.
enum LogLayout: Sendable {
    case singleNode
    case citus(CitusLog)

    /// The layout of the database `conninfo` names, asked once per process: `tracker migrate`
    /// makes it before anything else runs, and it never changes afterwards.
    static func of(_ connection: Connection, conninfo: String) throws -> LogLayout {
        if let known = known.withLock({ $0[conninfo] }) { return known }
        let distributed = try connection.query(CitusSQL.isDistributed).bool(0, 0) ?? false
        let layout: LogLayout = distributed ? .citus(CitusLog(conninfo: conninfo)) : .singleNode
        return known.withLock { cache in
            if let raced = cache[conninfo] { return raced }
            cache[conninfo] = layout
            return layout
        }
    }

    private static let known = Mutex<[String: LogLayout]>([:])

    var citus: CitusLog? {
        if case .citus(let log) = self { return log }
        return nil
    }
}

/// A Citus worker, as `pg_dist_node` names it.
struct WorkerNode: Hashable, Sendable, CustomStringConvertible {
    var host: String
    var port: Int
    var description: String { "\(host):\(port)" }
}

/// One shard of the distributed log: its table on its worker and how far it is projected.
struct LogShard: Sendable, Hashable {
    var id: Int64
    /// The shard's table on its worker (`events_102008`), as Citus names it.
    var table: String
    var node: WorkerNode
    var checkpoint: LogPosition
}

/// A shard's rows up to a point: how many wait behind the checkpoint (counted up to a cap),
/// since when, and whether any of them is readable yet.
struct ShardBacklog: Sendable {
    var events: Int
    /// Seconds since the oldest of them was received (`nil` when none waits).
    var seconds: Double?
    var readable: Bool
}

/// The log spread over Citus workers. Each shard's rows carry the transaction id and sequence
/// of the worker that stored them, so each is read on that worker, in that order, up to that
/// worker's horizon: the single-node rule (a row below the snapshot's xmin can no longer appear
/// behind a reader) holds shard by shard. Reads go to the workers directly, on connections
/// made from the coordinator's connection string with the worker's host and port.
final class CitusLog: Sendable {
    let conninfo: String
    private let workers: WorkerConnections
    /// The workers' reads, prepared on each worker connection under one name per distinct text.
    /// Every read asks for all of a worker's shards (checkpoints are parameters), so a text
    /// depends only on which shards the worker holds and a connection plans it once: planning a
    /// union over every shard's daily partitions costs more than running it.
    private let statements = Mutex<[String: PreparedStatement]>([:])

    init(conninfo: String) {
        self.conninfo = conninfo
        self.workers = WorkerConnections(conninfo: conninfo)
    }

    /// Every shard of the log with its checkpoint (from `log_shards`, as the search path finds
    /// it: a rebuild's own copy while it catches up).
    func shards(on coordinator: Connection) throws -> [LogShard] {
        let r = try coordinator.query(CitusSQL.shards)
        var shards: [LogShard] = []
        shards.reserveCapacity(r.rowCount)
        for row in 0..<r.rowCount {
            guard let id = r.int64(row, 0), let table = r.string(row, 1), let host = r.string(row, 2),
                  let port = r.int64(row, 3), let tx = r.string(row, 4), let seq = r.string(row, 5) else {
                throw DatabaseError(.unexpectedResult, serverMessage: "log_shards: an unreadable row")
            }
            if r.bool(row, 6) != true { throw ProjectorError.shardMoved(shard: id, node: "\(host):\(port)") }
            if (r.int64(row, 7) ?? 1) != 1 { throw ProjectorError.shardReplicated(shard: id) }
            shards.append(LogShard(id: id, table: table, node: WorkerNode(host: host, port: Int(port)),
                                   checkpoint: LogPosition(tx: tx, seq: seq)))
        }
        guard !shards.isEmpty else {
            throw DatabaseError(.unexpectedResult, serverMessage: "log_shards lists no shard of the log")
        }
        return shards
    }

    /// The next events of each shard past its checkpoint and below its worker's horizon, at most
    /// `limit` per shard: one result per worker, rows shard by shard in log order, with the
    /// columns of `ProjectorSQL.nextEvents` and then the shard's id.
    func nextEvents(_ shards: [LogShard], limit: Int) throws -> [QueryResult] {
        try byNode(shards).map { node, shards in
            let statement = prepared(CitusSQL.nextEvents(shards, limit: limit))
            return try workers.with(node) { c in
                try c.transaction {
                    try c.execute(CitusSQL.readSettings)
                    return try c.query(statement, CitusSQL.checkpoints(of: shards), binaryResults: true)
                }
            }
        }
    }

    /// The newest committed row of each shard that has one.
    func heads(_ shards: [LogShard]) throws -> [Int64: LogPosition] {
        var heads: [Int64: LogPosition] = [:]
        for (node, shards) in byNode(shards) {
            let statement = prepared(CitusSQL.heads(shards))
            let r = try workers.with(node) { try $0.query(statement, []) }
            for row in 0..<r.rowCount {
                guard let id = r.int64(row, 0), let tx = r.string(row, 1), let seq = r.string(row, 2) else { continue }
                heads[id] = LogPosition(tx: tx, seq: seq)
            }
        }
        return heads
    }

    /// What waits behind each shard's checkpoint (counted up to `cap` per shard).
    func backlog(_ shards: [LogShard], cap: Int, networks: NetworkScope? = nil) throws -> [Int64: ShardBacklog] {
        var backlog: [Int64: ShardBacklog] = [:]
        for (node, shards) in byNode(shards) {
            let statement = prepared(CitusSQL.backlog(shards, cap: cap, ofNetworks: networks != nil))
            let parameters = CitusSQL.checkpoints(of: shards) + (networks.map { [$0.arrayParameter] } ?? [])
            let r = try workers.with(node) { c in
                try c.transaction {
                    try c.execute(CitusSQL.readSettings)
                    return try c.query(statement, parameters)
                }
            }
            for row in 0..<r.rowCount {
                guard let id = r.int64(row, 0) else { continue }
                backlog[id] = ShardBacklog(events: Int(r.int64(row, 1) ?? 0), seconds: r.string(row, 2).flatMap(Double.init),
                                           readable: r.bool(row, 3) ?? false)
            }
        }
        return backlog
    }

    /// Runs `body` on a connection to `node` (for a rebuild's copy of a shard).
    func withWorker<T>(_ node: WorkerNode, _ body: (Connection) throws -> T) throws -> T {
        try workers.with(node, body)
    }

    /// The statement named for `sql` (a name per text, made the first time it is asked).
    private func prepared(_ sql: String) -> PreparedStatement {
        statements.withLock { known in
            if let statement = known[sql] { return statement }
            let statement = PreparedStatement(name: "tracker_citus_\(known.count)", sql: sql)
            known[sql] = statement
            return statement
        }
    }

    /// The shards grouped by worker, in a stable order.
    func byNode(_ shards: [LogShard]) -> [(WorkerNode, [LogShard])] {
        Dictionary(grouping: shards, by: \.node).sorted { $0.key.description < $1.key.description }.map { ($0.key, $0.value) }
    }
}

/// Connections to the workers, made as needed and kept for the next read. They are used only
/// inside a closure that already holds a coordinator connection of a pool, so there are never
/// more per worker than the pool has connections.
final class WorkerConnections: Sendable {
    private let conninfo: String
    private let idle = Mutex<[WorkerNode: [Kept]]>([:])

    /// A connection between two uses; only one thread holds it at a time.
    private final class Kept: @unchecked Sendable {
        let connection: Connection
        init(_ connection: Connection) { self.connection = connection }
    }

    init(conninfo: String) {
        self.conninfo = conninfo
    }

    func with<T>(_ node: WorkerNode, _ body: (Connection) throws -> T) throws -> T {
        var kept = idle.withLock { $0[node]?.popLast() }
        if let k = kept, !k.connection.isHealthy {
            k.connection.close()
            kept = nil
        }
        let connection = try kept?.connection
            ?? Connection.open(ConnectionString.replacingHost(of: conninfo, host: node.host, port: node.port))
        // Whatever the body did, the connection leaves no transaction open and is kept only
        // while it is healthy.
        defer {
            connection.rollbackIfInTransaction()
            if connection.isHealthy {
                let k = Kept(connection)
                idle.withLock { $0[node, default: []].append(k) }
            } else {
                connection.close()
            }
        }
        return try body(connection)
    }
}

enum CitusSQL {
    /// Whether the log is distributed (the Citus layout made `log_shards`).
    static let isDistributed = "SELECT to_regclass('log_shards') IS NOT NULL"

    /// Columns: 0 shard id, 1 its table, 2-3 its worker, 4-5 checkpoint, 6 whether the shard is
    /// still on the worker that stamped its rows, 7 its number of placements.
    static let shards = """
        SELECT l.shard_id, shard_name('events'::regclass, l.shard_id), n.nodename, n.nodeport,
               l.checkpoint_tx::text, l.checkpoint_seq, p.groupid = l.node_group,
               count(*) OVER (PARTITION BY l.shard_id)
        FROM log_shards l
        JOIN pg_dist_placement p ON p.shardid = l.shard_id
        JOIN pg_dist_node n ON n.groupid = p.groupid
        ORDER BY l.shard_id
        """

    /// The projector's planner settings, for reads on a worker, and the generic plan from the
    /// first run of a prepared read (a custom plan would plan the union again on each of the
    /// first five runs, for the same plan).
    static let readSettings = ProjectorSQL.plannerSettings + "; SET LOCAL plan_cache_mode = force_generic_plan"

    /// The checkpoint of the shard at `index` in a read's list: its two parameters.
    private static func position(_ index: Int) -> String {
        "($\(2 * index + 1)::xid8, $\(2 * index + 2)::bigint)"
    }

    /// The parameters of `nextEvents` and `backlog`: each shard's checkpoint, in the list's order.
    static func checkpoints(of shards: [LogShard]) -> [Parameter] {
        shards.flatMap { [Parameter.text($0.checkpoint.tx), .text($0.checkpoint.seq)] }
    }

    static func nextEvents(_ shards: [LogShard], limit: Int) -> String {
        shards.enumerated().map { index, s in
            """
            (SELECT \(AdEventColumn.list), tx, seq, \(s.id)::bigint FROM \(s.table)
             WHERE (tx, seq) > \(position(index)) AND tx < pg_snapshot_xmin(pg_current_snapshot())
             ORDER BY tx, seq LIMIT \(limit))
            """
        }.joined(separator: " UNION ALL ")
    }

    /// Columns: 0 shard id, 1 tx, 2 seq of the shard's newest row.
    static func heads(_ shards: [LogShard]) -> String {
        shards.map { s in
            // Output names that are not the table's: ORDER BY tx must sort the xid8, not its text.
            "(SELECT \(s.id)::bigint AS shard, tx::text AS head_tx, seq AS head_seq FROM \(s.table) ORDER BY tx DESC, seq DESC LIMIT 1)"
        }.joined(separator: " UNION ALL ")
    }

    /// Columns: 0 shard id, 1 rows past the checkpoint (up to `cap`), 2 seconds since the oldest
    /// of them was received, 3 whether one is below the worker's horizon (readable now).
    /// `ofNetworks`: counted over the ad units of the networks given after the checkpoints only.
    static func backlog(_ shards: [LogShard], cap: Int, ofNetworks: Bool = false) -> String {
        let networks = "$\(2 * shards.count + 1)::text[]"
        return shards.enumerated().map { index, s in
            """
            (SELECT \(s.id)::bigint, count(*), (extract(epoch FROM now() - min(received_at)))::float8::text,
                    coalesce(bool_or(tx < pg_snapshot_xmin(pg_current_snapshot())), false)
             FROM (SELECT tx, received_at, ad_unit FROM \(s.table) WHERE (tx, seq) > \(position(index))
                   ORDER BY tx, seq LIMIT \(cap)) pending\(ofNetworks ? " WHERE split_part(ad_unit, '/', 2) = ANY(\(networks))" : ""))
            """
        }.joined(separator: " UNION ALL ")
    }

    /// Moves the checkpoints of the shards a step read: $1 shard ids, $2 tx (text), $3 seq.
    static let checkpoints = """
        UPDATE log_shards l SET checkpoint_tx = u.tx::xid8, checkpoint_seq = u.seq
        FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(shard, tx, seq)
        WHERE l.shard_id = u.shard
        """
}

/// Where a rebuild's bulk copy of the log stops: below one horizon (the snapshot's xmin, on a
/// Citus coordinator made safe for two-phase commits). Worker-stamped rows of a log distributed
/// by an older tracker stop below their worker's own. What is above it is the catch-up's.
struct Horizons {
    /// The horizon of a log in one table; on a distributed log "1", since `projection_state`'s
    /// checkpoint is unused there.
    let single: String
    /// A distributed log: every cursor, each with the horizon it is copied below.
    private(set) var shards: [LogShard] = []
    private var byCursor: [Int64: UInt64] = [:]

    /// Takes the horizons after letting transactions that were still open at `head` end (for
    /// up to 10 s), so that the bulk phases copy every event committed before the rebuild began
    /// and the progress shows them, instead of the catch-up picking them up unseen.
    init(_ layout: LogLayout, head: LogHead?, on c: Connection) throws {
        func waitForEnd(of tx: UInt64?, on connection: Connection) throws {
            guard let tx else { return }
            for _ in 0..<200 {
                if try connection.hasEnded(beforeHorizon: String(tx)) { return }
                try connection.sleep(for: .milliseconds(50))
            }
        }
        var heads: [Int64: LogPosition] = [:]
        switch head {
        case .single(let position)?:
            try waitForEnd(of: position.order?.tx, on: c)
        case .shards(let h)?:
            heads = h
            try waitForEnd(of: h.filter { $0.key > 0 }.compactMap { $0.value.order?.tx }.max(), on: c)
        case nil:
            break
        }
        switch layout {
        case .singleNode:
            single = try c.snapshotHorizon()
        case .coordinator(let log):
            single = String(try log.coordinatorHorizon(on: c, patience: .rebuild))
        case .citus(let log):
            single = "1"
            let found = try log.shards(on: c)
            shards = found.all
            let coordinator = try log.usableHorizon(taken: found.taken, nodes: found.nodes, patience: .rebuild)
            for shard in shards where shard.cursor > 0 { byCursor[shard.cursor] = coordinator }
            for (node, nodeShards) in log.byNode(shards.filter { $0.cursor < 0 }) {
                let horizon = try log.withWorker(node) { worker in
                    try waitForEnd(of: nodeShards.compactMap { heads[$0.cursor]?.order?.tx }.max(), on: worker)
                    let horizon = try worker.snapshotHorizon()
                    guard let number = UInt64(horizon) else {
                        throw DatabaseError(.unexpectedResult, serverMessage: "snapshot xmin of \(node) is not a number: \(horizon)")
                    }
                    return number
                }
                for shard in nodeShards { byCursor[shard.cursor] = horizon }
            }
        }
    }

    /// The horizon a cursor's rows are copied below.
    func below(_ shard: LogShard) -> UInt64 {
        max(byCursor[shard.cursor] ?? 1, 1)
    }

    /// Each cursor's checkpoint just below its horizon, into the rebuild's `log_shards`.
    func storeShardCheckpoints(on c: Connection) throws {
        var ids = BinaryArray(.int8, capacity: shards.count), txs = BinaryArray(.text), seqs = BinaryArray(.int8)
        for shard in shards {
            ids.append(shard.cursor)
            txs.append(String(below(shard) - 1))
            seqs.append(Int64.max)
        }
        try c.query(RebuildSQL.shardCheckpoints, [ids.parameter, txs.parameter, seqs.parameter])
    }

    /// `RebuildSQL.openGroups` on a distributed log: each worker counts its shards' rows below
    /// their horizons; a client's group may span workers, so the counts and members are merged
    /// here before they go into the rebuild's `client_minutes`.
    func openGroups(of log: CitusLog, limit: Int, since: BinaryArray, on c: Connection) throws {
        struct Group: Hashable {
            var minute: [UInt8]
            var userAgent: Int32
            var address: [UInt8]
        }
        var merged: [Group: (events: Int64, members: [UInt8])] = [:]
        for (node, nodeShards) in log.byNode(shards) {
            let r = try log.withWorker(node) { worker in
                try worker.query(RebuildSQL.openGroupsOfShards(nodeShards, below: byCursor), [since.parameter], binaryResults: true)
            }
            for row in 0..<r.rowCount {
                guard let agent = ByteReader.int32(r.bytes(row, 1)), let events = ByteReader.int64(r.bytes(row, 3)) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "rebuild: an unreadable client group")
                }
                let group = Group(minute: Array(r.bytes(row, 0)), userAgent: agent, address: Array(r.bytes(row, 2)))
                merged[group, default: (0, [])].events += events
                merged[group, default: (0, [])].members += r.bytes(row, 4)
            }
        }
        guard !merged.isEmpty else { return }
        var minutes = BinaryArray(.timestamptz), agents = BinaryArray(.int4), addresses = BinaryArray(.inet)
        var counts = BinaryArray(.int8), members = BinaryArray(.bytea)
        for (group, value) in merged {
            minutes.append(bytes: group.minute)
            agents.append(group.userAgent)
            addresses.append(bytes: group.address)
            counts.append(value.events)
            // Over the limit, a group's members are all labelled already: none is kept.
            if value.events > Int64(limit) { members.appendNull() } else { members.append(bytes: value.members) }
        }
        try c.query(RebuildSQL.insertClientMinutes, [minutes.parameter, agents.parameter, addresses.parameter,
                                                      counts.parameter, members.parameter])
    }
}

extension RebuildSQL {
    /// The rebuild's shard checkpoints: $1 cursors, $2 tx (text), $3 seq (`CitusSQL.cursorPositions`);
    /// each shard keeps its worker (node_group) from the live table.
    static let shardCheckpoints = """
        INSERT INTO tracker_rebuild.log_shards (shard_id, node_group, checkpoint_tx, checkpoint_seq, worker_checkpoint_tx, worker_checkpoint_seq)
        SELECT l.shard_id, l.node_group, coalesce(u.tx, '0'), coalesce(u.seq, 0), u.worker_tx, u.worker_seq
        FROM public.log_shards l JOIN (\(CitusSQL.cursorPositions)) u ON u.shard = l.shard_id
        """

    /// `openGroups`' groups of some cursors of one worker, below their horizons (binary:
    /// minute, user agent, address, events, members).
    static func openGroupsOfShards(_ shards: [LogShard], below horizons: [Int64: UInt64]) -> String {
        let rows = CitusSQL.rows(of: shards, columns: "received_at, user_agent_id, client_ip, request_id, id, type, load_id", below: horizons,
                                 where: "received_at >= ($1::timestamptz[])[1] AND user_agent_id IS NOT NULL AND client_ip IS NOT NULL")
        return """
            SELECT date_trunc('minute', received_at), user_agent_id, client_ip, count(*),
                   string_agg(\(ClientMinutesSQL.membersOfRow), ''::bytea)
            FROM (\(rows)) e
            GROUP BY 1, 2, 3
            """
    }

    static let insertClientMinutes = """
        INSERT INTO client_minutes (minute, user_agent_id, client_ip, events, members)
        SELECT * FROM unnest($1::timestamptz[], $2::int4[], $3::inet[], $4::bigint[], $5::bytea[])
        """
}

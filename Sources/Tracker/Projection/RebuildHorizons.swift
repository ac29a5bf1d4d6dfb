/// Where a rebuild's bulk copy of the log stops: below one horizon (the snapshot's xmin), or,
/// on a distributed log, below each worker's own. What is above it is the catch-up's.
struct Horizons {
    /// The single-node horizon; on Citus "1", since `projection_state`'s checkpoint is unused there.
    let single: String
    /// Citus: every shard of the log and the horizon of each worker.
    private(set) var shards: [LogShard] = []
    private(set) var byNode: [WorkerNode: UInt64] = [:]

    /// Takes the horizons after letting transactions that were still open at `head` end (for
    /// up to 10 s), so that the bulk phases copy every event committed before the rebuild began
    /// and the progress shows them, instead of the catch-up picking them up unseen.
    init(_ layout: LogLayout, head: LogHead?, on c: Connection) throws {
        func waitForEnd(of tx: String?, on connection: Connection) throws {
            guard let tx else { return }
            for _ in 0..<200 {
                if try connection.hasEnded(beforeHorizon: tx) { return }
                try connection.sleep(for: .milliseconds(50))
            }
        }
        switch layout {
        case .singleNode:
            if case .single(let position)? = head { try waitForEnd(of: position.tx, on: c) }
            single = try c.snapshotHorizon()
        case .citus(let log):
            single = "1"
            shards = try log.shards(on: c)
            let heads: [Int64: LogPosition]
            if case .shards(let h)? = head { heads = h } else { heads = [:] }
            for (node, nodeShards) in log.byNode(shards) {
                let newest = nodeShards.compactMap { heads[$0.id]?.order?.tx }.max()
                byNode[node] = try log.withWorker(node) { worker in
                    try waitForEnd(of: newest.map(String.init), on: worker)
                    let horizon = try worker.snapshotHorizon()
                    guard let number = UInt64(horizon) else {
                        throw DatabaseError(.unexpectedResult, serverMessage: "snapshot xmin of \(node) is not a number: \(horizon)")
                    }
                    return number
                }
            }
        }
    }

    /// Each shard's checkpoint just below its worker's horizon, into the rebuild's `log_shards`.
    func storeShardCheckpoints(on c: Connection) throws {
        var ids = BinaryArray(.int8, capacity: shards.count), txs = BinaryArray(.text), seqs = BinaryArray(.int8)
        for shard in shards {
            ids.append(shard.id)
            txs.append(String((byNode[shard.node] ?? 1) - 1))
            seqs.append(Int64.max)
        }
        try c.query(RebuildSQL.shardCheckpoints, [ids.parameter, txs.parameter, seqs.parameter])
    }

    /// `RebuildSQL.openGroups` on a distributed log: each worker counts its shards' rows below
    /// its horizon; a client's group may span workers, so the counts and members are merged
    /// here before they go into the rebuild's `client_minutes`.
    func openGroups(of log: CitusLog, limit: Int, since: BinaryArray, on c: Connection) throws {
        struct Group: Hashable {
            var minute: [UInt8]
            var userAgent: Int32
            var address: [UInt8]
        }
        var merged: [Group: (events: Int64, members: [UInt8])] = [:]
        for (node, nodeShards) in log.byNode(shards) {
            let horizon = byNode[node] ?? 0
            let r = try log.withWorker(node) { worker in
                try worker.query(RebuildSQL.openGroupsOfShards(nodeShards.map(\.table), below: horizon), [since.parameter],
                                 binaryResults: true)
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
    /// The rebuild's shard checkpoints: $1 shard ids, $2 tx (text), $3 seq; each shard keeps
    /// its worker (node_group) from the live table.
    static let shardCheckpoints = """
        INSERT INTO tracker_rebuild.log_shards (shard_id, node_group, checkpoint_tx, checkpoint_seq)
        SELECT l.shard_id, l.node_group, u.tx::xid8, u.seq
        FROM public.log_shards l JOIN unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(shard, tx, seq) ON u.shard = l.shard_id
        """

    /// `openGroups`' groups of some shards of one worker, below its horizon (binary: minute,
    /// user agent, address, events, members).
    static func openGroupsOfShards(_ tables: [String], below horizon: UInt64) -> String {
        let rows = tables.map { table in
            """
            SELECT received_at, user_agent_id, client_ip, request_id, id, type, load_id FROM \(table)
            WHERE tx < '\(horizon)'::xid8 AND received_at >= ($1::timestamptz[])[1]
              AND user_agent_id IS NOT NULL AND client_ip IS NOT NULL
            """
        }.joined(separator: " UNION ALL ")
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

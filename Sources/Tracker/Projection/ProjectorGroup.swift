/// One of several projectors of a distributed log that work at once (`tracker project --group
/// K/N`): each reads the shards of its group and is the only writer of the states (`ad_state`)
/// of their ads and loads.
///
/// The shards of the log, in the order of their ids, are dealt to the groups in turn: group K
/// of N takes the shards at positions K − 1, K − 1 + N, … Two projectors that disagree about N
/// still never read one shard at once: a step locks its shards' checkpoints (`log_shards`) before
/// it reads them, so they take turns on the shards they share.
public struct ProjectorGroup: Sendable, Hashable, CustomStringConvertible {
    /// 1-based.
    public let index: Int
    public let count: Int

    /// The most groups `K/N` names: a bound on what a setting can ask for, far above the
    /// shards a cluster has (32 by default; a group without a shard has nothing to project).
    public static let maxCount = 1024

    public init?(index: Int, count: Int) {
        guard (1...Self.maxCount).contains(count), (1...count).contains(index) else { return nil }
        self.index = index
        self.count = count
    }

    /// `K/N`, as `--group` and `TRACKER_PROJECTOR_GROUP` take it.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let k = Int(parts[0]), let n = Int(parts[1]) else { return nil }
        self.init(index: k, count: n)
    }

    public var description: String { "\(index)/\(count)" }

    /// The ids of the shards of this group among every shard of the log.
    func shards(of all: some Sequence<Int64>) -> Set<Int64> {
        Set(Set(all).sorted().enumerated().filter { $0.offset % count == index - 1 }.map(\.element))
    }
}

/// What a step on a distributed log writes itself, and what it leaves in another group's
/// inbox: a step of one group writes only the states of its shards.
struct ShardRouting {
    /// The shards whose states this step writes; `nil`: every shard (a projector of the whole log).
    let own: Set<Int64>?
    /// Whether the log is distributed: its shards' projectors may be at different places in
    /// it (`ClientMinutes.forgetBehindEveryShard`), and a relabel of an event not folded yet
    /// waits in the inbox (`AdStateStore.applyHighRate`).
    let distributed: Bool
    /// The shard of each state key looked up so far.
    private var shardOf: [String: Int64] = [:]
    /// What the step owes other groups' states, written with its checkpoints.
    private(set) var outbox: [InboxEntry] = []

    init(own: Set<Int64>?, distributed: Bool) {
        self.own = own
        self.distributed = distributed
    }

    /// Whether this step writes every state (no other group exists).
    var isWhole: Bool { own == nil }

    /// The keys among `keys` whose states another group writes.
    mutating func foreign(_ keys: some Collection<String>, on connection: Connection) throws -> Set<String> {
        guard let own, !keys.isEmpty else { return [] }
        try lookUp(keys, on: connection)
        return Set(keys.filter { key in shardOf[key].map { !own.contains($0) } ?? false })
    }

    /// Finds the shard of each of `keys` not looked up yet (what `send` addresses).
    mutating func lookUp(_ keys: some Collection<String>, on connection: Connection) throws {
        let unknown = keys.filter { shardOf[$0] == nil }
        if !unknown.isEmpty {
            var names = BinaryArray(.text, capacity: unknown.count)
            for key in unknown { names.append(key) }
            let r = try connection.query(InboxSQL.shardOf, [names.parameter])
            for row in 0..<r.rowCount {
                guard let key = r.string(row, 0), let shard = r.int64(row, 1) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "get_shard_id_for_distribution_column: an unreadable row")
                }
                shardOf[key] = shard
            }
        }
    }

    /// Leaves a load reference for the group of `key`'s shard (`key` was found foreign).
    mutating func send(reference event: AdEvent, to key: String) {
        guard let shard = shardOf[key] else { return }
        outbox.append(InboxEntry(shard: shard, key: key, content: .reference(event)))
    }

    /// Leaves a `high_rate` label of event `id` for the group of `key`'s shard.
    mutating func send(relabel id: PackedUUID, of key: String) {
        guard let shard = shardOf[key] else { return }
        outbox.append(InboxEntry(shard: shard, key: key, content: .relabel(id)))
    }
}

/// One row of `projection_inbox`: what a step of one group owes a state another group writes.
struct InboxEntry {
    enum Content {
        /// A load reference (`AdEvent.loadReference`), labelled by the step that read its `ad_loaded`.
        case reference(AdEvent)
        /// The event `id` of the state is `high_rate`: its group went over the limit.
        case relabel(PackedUUID)
    }

    var shard: Int64
    var key: String
    var content: Content
}

/// The inbox of the groups' projectors (`projection_inbox`): written by a step in the same
/// transaction as its checkpoints, read and emptied by the owner's next step in the same
/// transaction as its own.
enum Inbox {
    /// The oldest `limit` entries for `shards`, oldest first, with their sequence numbers (to
    /// delete them). A relabel is never read before the reference it may name: the reference
    /// committed first, with a lower number.
    static func read(for shards: Set<Int64>?, limit: Int, strings: inout StringTable,
                     on connection: Connection) throws -> (entries: [InboxEntry], seqs: BinaryArray) {
        var ids = BinaryArray(.int8)
        for shard in shards ?? [] { ids.append(shard) }
        let r = try connection.query(shards == nil ? InboxSQL.readAll : InboxSQL.read,
                                     [.text(String(limit))] + (shards == nil ? [] : [ids.parameter]), binaryResults: true)
        var entries: [InboxEntry] = []
        var seqs = BinaryArray(.int8, capacity: r.rowCount)
        for row in 0..<r.rowCount {
            guard let seq = ByteReader.int64(r.bytes(row, 0)), let shard = ByteReader.int64(r.bytes(row, 1)) else {
                throw DatabaseError(.unexpectedResult, serverMessage: "projection_inbox: an unreadable row")
            }
            let key = String(decoding: r.bytes(row, 2), as: UTF8.self)
            let content: InboxEntry.Content
            if !r.isNull(row, 3) {
                guard let events = AdState.decode(r.bytes(row, 3), strings: &strings), events.count == 1 else {
                    throw ProjectorError.unreadableAdState(requestId: key)
                }
                content = .reference(events[0])
            } else {
                var reader = ByteReader(r.bytes(row, 4))
                guard let id = reader.uuid() else { throw DatabaseError(.unexpectedResult, serverMessage: "projection_inbox: a relabel without its id") }
                content = .relabel(id)
            }
            entries.append(InboxEntry(shard: shard, key: key, content: content))
            seqs.append(seq)
        }
        return (entries, seqs)
    }

    /// Deletes the entries read (`read`'s sequence numbers) and writes `outbox`.
    static func settle(read seqs: BinaryArray, outbox: [InboxEntry], on connection: Connection) throws {
        if seqs.count > 0 { try connection.query(InboxSQL.delete, [seqs.parameter]) }
        guard !outbox.isEmpty else { return }
        var shards = BinaryArray(.int8, capacity: outbox.count), keys = BinaryArray(.text, capacity: outbox.count)
        var events = BinaryArray(.bytea, capacity: outbox.count), ids = BinaryArray(.uuid, capacity: outbox.count)
        var networks = BinaryArray(.text, capacity: outbox.count)
        for entry in outbox {
            shards.append(entry.shard)
            keys.append(entry.key)
            switch entry.content {
            case .reference(let event):
                events.append(bytes: AdState.encode([event]))
                ids.appendNull()
                networks.append(String(NetworkScope.network(of: event.adUnit)))
            case .relabel(let id):
                events.appendNull()
                ids.append(uuid: id.high, id.low)
                networks.appendNull()
            }
        }
        try connection.query(InboxSQL.write, [shards.parameter, keys.parameter, events.parameter, ids.parameter, networks.parameter])
    }
}

enum InboxSQL {
    /// Columns: 0 key, 1 the log shard its rows (and its state) are on.
    static let shardOf = "SELECT k, get_shard_id_for_distribution_column('events', k) FROM unnest($1::text[]) AS k"

    /// Binary columns: 0 seq, 1 shard, 2 key, 3 event (NULL: a relabel), 4 event id; the
    /// oldest $1 entries for the shards $2.
    static let read = entries(where: "WHERE shard_id = ANY($2::bigint[])")
    /// `read` of every shard.
    static let readAll = entries(where: "")

    private static func entries(where condition: String) -> String {
        "SELECT seq, shard_id, state_key, event, event_id FROM projection_inbox \(condition) ORDER BY seq LIMIT $1::int"
    }

    static let delete = "DELETE FROM projection_inbox WHERE seq = ANY($1::bigint[])"

    static let write = """
        INSERT INTO projection_inbox (shard_id, state_key, event, event_id, network)
        SELECT * FROM unnest($1::bigint[], $2::text[], $3::bytea[], $4::uuid[], $5::text[])
        """

    /// The references of the networks $1 waiting in the inbox (a scoped key's share of the lag).
    static let referencesOfNetworks = "SELECT count(*) FROM projection_inbox WHERE network = ANY($1::text[])"
}

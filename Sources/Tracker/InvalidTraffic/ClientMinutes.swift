/// One group of the `high_rate` rule: a client (user agent and address) in one UTC minute of receipt.
struct ClientGroup: Hashable {
    /// Minutes since 1970-01-01T00:00Z of the events' receipt.
    var minute: Int64
    var userAgent: Int32
    /// The address as a binary `inet`.
    var address: [UInt8]

    static let microsecondsPerMinute: Int64 = 60_000_000
}

extension ClientGroup {
    /// The group of an event received at `receivedAt` from `userAgent` at `address`; `nil`
    /// when either is unknown (such an event is in no group).
    init?(receivedAt: Timestamp, userAgent: Int32?, address: [UInt8]?) {
        guard let userAgent, let address else { return nil }
        self.init(minute: receivedAt.microseconds / Self.microsecondsPerMinute, userAgent: userAgent, address: address)
    }
}

extension IVTLabel {
    /// An event's label, by the one rule the projector and the rebuild both follow: its
    /// client's (`declared_bot`, then `datacenter`: `IVTLabeller.label`) first, else
    /// `high_rate` when its group holds more events than the rule set's limit.
    static func of(client: IVTLabel?, group: ClientGroup?, overLimit: (ClientGroup) -> Bool) -> IVTLabel? {
        if let client { return client }
        guard let group, overLimit(group) else { return nil }
        return .highRate
    }
}

/// An event of a group, as `client_minutes.members` lists it: enough to find it in `ad_state`,
/// by the key of a state that holds it (its ad's, or the load an `ad_loaded` names: such an
/// event is a member twice, once per state).
struct GroupMember: Hashable {
    var requestId: String
    var id: PackedUUID
}

/// What one step adds to a group: its events, and the states they are in.
struct GroupAddition {
    var events = 0
    var members: [GroupMember] = []
}

/// The `high_rate` rule's counts (`client_minutes`): stored events per client and minute.
///
/// A group is decided on stored events, so a retried batch (its events are stored once) adds
/// nothing, and the label is the same whatever order the events arrive in: every event of a
/// group that holds more than the limit is labelled, also those projected before the group
/// went over it (their ads are recomputed then).
enum ClientMinutes {
    /// Adds `added` events to their groups.
    ///
    /// - Returns: the groups that hold more events than `limit` after this (every event of
    ///   them is `high_rate`), and the events of earlier steps in groups that went over the
    ///   limit in this one (they are to be relabelled).
    ///
    /// - Parameter concurrently: whether projectors of other groups count into the same groups
    ///   meanwhile: then every group is first made to exist, so that the lock (in one order)
    ///   makes two steps wait for each other's counts rather than overwrite them.
    static func count(_ added: [ClientGroup: GroupAddition], limit: Int, concurrently: Bool = false,
                      on connection: Connection) throws -> (overLimit: Set<ClientGroup>, relabel: [GroupMember]) {
        guard !added.isEmpty else { return ([], []) }
        let groups = Array(added.keys)
        var minutes = BinaryArray(.timestamptz, capacity: groups.count)
        var agents = BinaryArray(.int4, capacity: groups.count)
        var addresses = BinaryArray(.inet, capacity: groups.count)
        for g in groups {
            minutes.append(microsecondsSince1970: g.minute * ClientGroup.microsecondsPerMinute)
            agents.append(g.userAgent)
            addresses.append(bytes: g.address)
        }
        let keys = [minutes.parameter, agents.parameter, addresses.parameter]
        if concurrently { try connection.query(ClientMinutesSQL.create, keys) }
        let stored = try connection.query(ClientMinutesSQL.lock, keys, binaryResults: true)
        var before: [ClientGroup: (events: Int, members: [UInt8]?)] = [:]
        for row in 0..<stored.rowCount {
            guard let micros = BinaryValue.microsecondsSince1970(timestamptz: stored.bytes(row, 0)),
                  let agent = ByteReader.int32(stored.bytes(row, 1)), let events = ByteReader.int32(stored.bytes(row, 3))
            else { throw DatabaseError(.unexpectedResult, serverMessage: "client_minutes: an unreadable row") }
            let group = ClientGroup(minute: micros / ClientGroup.microsecondsPerMinute, userAgent: agent, address: Array(stored.bytes(row, 2)))
            before[group] = (Int(events), stored.isNull(row, 4) ? nil : Array(stored.bytes(row, 4)))
        }

        var overLimit = Set<ClientGroup>()
        var relabel: [GroupMember] = []
        var counts = BinaryArray(.int4, capacity: groups.count)
        var members = BinaryArray(.bytea, capacity: groups.count)
        for g in groups {
            let new = added[g]!
            let old = before[g]
            let total = (old?.events ?? 0) + new.events
            counts.append(Int32(clamping: total))
            if total > limit {
                overLimit.insert(g)
                if let old, old.events <= limit, let packed = old.members {
                    relabel += try decode(packed)
                }
                members.appendNull()
            } else {
                var packed = old?.members ?? []
                for m in new.members { encode(m, into: &packed) }
                members.append(bytes: packed)
            }
        }
        try connection.query(ClientMinutesSQL.store, [minutes.parameter, agents.parameter, addresses.parameter,
                                                      counts.parameter, members.parameter])
        return (overLimit, relabel)
    }

    /// Forgets the groups of minutes before `minute`: an event is committed within seconds of
    /// its receipt, so they take no more events.
    static func forget(before minute: Int64, on connection: Connection) throws {
        var limit = BinaryArray(.timestamptz, capacity: 1)
        limit.append(microsecondsSince1970: minute * ClientGroup.microsecondsPerMinute)
        try connection.query("DELETE FROM client_minutes WHERE minute < ($1::timestamptz[])[1]", [limit.parameter])
    }

    /// Forgets the groups of minutes an hour before the newest receipt every shard's projector
    /// has projected (`log_shards.projected_receipt`): with a projector per group of shards, one
    /// may be far behind another, and a group forgotten before it counted its events would be
    /// decided on part of them. Nothing is forgotten while a shard has none yet.
    static func forgetBehindEveryShard(on connection: Connection) throws {
        try connection.query(ClientMinutesSQL.forgetBehindEveryShard, [String(keptMinutes)])
    }

    /// How far behind the newest projected receipt a group is kept.
    static let keptMinutes: Int64 = 60

    static func encode(_ member: GroupMember, into out: inout [UInt8]) {
        out.appendBigEndian(UInt16(truncatingIfNeeded: member.requestId.utf8.count))
        out.append(contentsOf: member.requestId.utf8)
        out.appendBigEndian(member.id.high)
        out.appendBigEndian(member.id.low)
    }

    static func decode(_ packed: [UInt8]) throws -> [GroupMember] {
        try packed.withUnsafeBytes { bytes in
            var reader = ByteReader(bytes)
            var out: [GroupMember] = []
            while !reader.isAtEnd {
                var strings = StringTable(limit: 1)
                guard let requestId = reader.string(&strings), let id = reader.uuid() else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "client_minutes: members do not follow their layout")
                }
                out.append(GroupMember(requestId: requestId, id: id))
            }
            return out
        }
    }
}

enum ClientMinutesSQL {
    /// A log row's members as `ClientMinutes.encode` packs them (for `string_agg`): its state's
    /// key and id, and for an `ad_loaded` that names its load, the load's key and id too.
    static let membersOfRow = """
        int2send(octet_length(request_id)::int2) || convert_to(request_id, 'UTF8') || uuid_send(id)
        || CASE WHEN type = 'ad_loaded' AND load_id IS NOT NULL
                THEN int2send(octet_length(load_id)::int2) || convert_to(load_id, 'UTF8') || uuid_send(id)
                ELSE ''::bytea END
        """

    /// Binary columns: 0 minute, 1 user agent, 2 address, 3 events, 4 members. Locked: the
    /// counts written back are computed from these. Locked in the order `create` makes the
    /// rows, so that two steps counting into the same minutes (projectors of groups) wait for
    /// each other and never each for the other.
    static let lock = """
        SELECT c.minute, c.user_agent_id, c.client_ip, c.events, c.members
        FROM client_minutes c
        JOIN unnest($1::timestamptz[], $2::int4[], $3::inet[]) AS g(minute, user_agent_id, client_ip)
          ON c.minute = g.minute AND c.user_agent_id = g.user_agent_id AND c.client_ip = g.client_ip
        ORDER BY c.minute, c.user_agent_id, c.client_ip
        FOR UPDATE OF c
        """

    /// Makes the groups $1-$3 exist (with no events yet), in one order: `lock` then locks rows
    /// that exist, and two steps making the same group wait for each other.
    static let create = """
        INSERT INTO client_minutes (minute, user_agent_id, client_ip, events, members)
        SELECT g.minute, g.user_agent_id, g.client_ip, 0, ''::bytea
        FROM unnest($1::timestamptz[], $2::int4[], $3::inet[]) AS g(minute, user_agent_id, client_ip)
        ORDER BY 1, 2, 3
        ON CONFLICT (minute, user_agent_id, client_ip) DO NOTHING
        """

    /// `ClientMinutes.forgetBehindEveryShard`: $1 the minutes kept.
    static let forgetBehindEveryShard = """
        DELETE FROM client_minutes
        WHERE minute < (SELECT date_trunc('minute', min(projected_receipt)) FROM log_shards HAVING bool_and(projected_receipt IS NOT NULL))
                       - make_interval(mins => $1::int)
        """

    static let store = """
        INSERT INTO client_minutes (minute, user_agent_id, client_ip, events, members)
        SELECT * FROM unnest($1::timestamptz[], $2::int4[], $3::inet[], $4::int4[], $5::bytea[])
        ON CONFLICT (minute, user_agent_id, client_ip) DO UPDATE SET events = excluded.events, members = excluded.members
        """
}

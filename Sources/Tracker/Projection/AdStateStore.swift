/// The per-ad memory (`ad_state`): what one step reads from it, computes, and writes back.
enum AdStateStore {
    /// How a step names the `ad_state` rows it read when it writes them back.
    enum RowKey {
        /// By `ctid`, the row's place: the cheapest way back to a row on one node.
        case rowID
        /// By request id: on Citus a `ctid` names a row only within one shard.
        case requestId

        fileprivate var element: BinaryArray.Element { self == .requestId ? .text : .tid }
        fileprivate var load: String { self == .requestId ? AdStateSQL.loadByRequestId : AdStateSQL.load }
        fileprivate var update: String { self == .requestId ? AdStateSQL.updateByRequestId : AdStateSQL.update }
    }

    /// One ad a step changes: its stored state (if any) and what it becomes.
    private struct Change {
        /// The row's key (`RowKey`) and its events as stored; `nil` for an ad new to the projections.
        var stored: (row: [UInt8], events: [AdEvent])?
        var events: [AdEvent]
    }

    /// Recomputes every ad of `batch`, and every ad whose events the step labels `high_rate`
    /// after the fact: subtracts its old contribution, adds its new one, and writes the ads'
    /// new states and the changed projection rows (in the caller's transaction).
    ///
    /// An id the ad already has is a retry the log stored again because retention forgot its
    /// id with its partition (`ad_state` is kept): it changes nothing, and counts in no group.
    static func project(_ batch: LogBatch, rules: AdContribution, labeller: IVTLabeller, rowKey: RowKey,
                        strings: inout StringTable, on connection: Connection) throws {
        let load = { (ads: Set<String>, strings: inout StringTable) in
            try Self.load(ads, rowKey: rowKey, strings: &strings, on: connection)
        }
        var changes = try load(Set(batch.events.keys), &strings)

        // The step's new events, labelled by their clients.
        var fresh: [String: [LogBatch.Logged]] = [:]
        var agents = Set<Int32>()
        for (ad, logged) in batch.events {
            let known = Set(changes[ad]?.stored?.events.lazy.map(\.id) ?? [])
            let new = logged.filter { !known.contains($0.event.id) }
            guard !new.isEmpty else { continue }
            fresh[ad] = new
            for l in new { if let a = l.userAgent { agents.insert(a) } }
        }
        try labeller.learn(userAgents: agents, on: connection)
        for (ad, logged) in fresh {
            fresh[ad] = logged.map { l in
                var l = l
                l.event.label = labeller.label(userAgent: l.userAgent, address: l.address, channel: l.channel)
                return l
            }
        }

        // high_rate: the step's events counted into their groups; a group over the limit labels
        // all its events, those of earlier steps too.
        if let limit = labeller.rules.maxEventsPerClientMinute {
            var added: [ClientGroup: [GroupMember]] = [:]
            for (ad, logged) in fresh {
                for l in logged {
                    guard let group = group(of: l) else { continue }
                    added[group, default: []].append(GroupMember(requestId: ad, id: l.event.id))
                }
            }
            let (overLimit, relabel) = try ClientMinutes.count(added, limit: limit, on: connection)
            for (ad, logged) in fresh {
                fresh[ad] = logged.map { l in
                    var l = l
                    if l.event.label == nil, let g = group(of: l), overLimit.contains(g) { l.event.label = .highRate }
                    return l
                }
            }
            if !relabel.isEmpty {
                let missing = Set(relabel.map(\.requestId)).subtracting(changes.keys)
                changes.merge(try load(missing, &strings)) { a, _ in a }
                let ids = Dictionary(grouping: relabel, by: \.requestId).mapValues { Set($0.map(\.id)) }
                for (ad, members) in ids {
                    guard var change = changes[ad] else { continue }
                    change.events = change.events.map { e in
                        var e = e
                        if e.label == nil, members.contains(e.id) { e.label = .highRate }
                        return e
                    }
                    changes[ad] = change
                }
            }
            if batch.newestReceipt.microseconds > 0 {
                try ClientMinutes.forget(before: batch.newestReceipt.microseconds / ClientGroup.microsecondsPerMinute - ClientMinutes.keptMinutes,
                                         on: connection)
            }
        }
        for (ad, logged) in fresh {
            changes[ad, default: Change(stored: nil, events: [])].events += logged.map(\.event)
        }

        var delta = Contribution(), removed = Contribution()
        var newAds = BinaryArray(.text), newStates = BinaryArray(.bytea)
        var changedRows = BinaryArray(rowKey.element), changedStates = BinaryArray(.bytea)
        var inserted = 0, updated = 0
        var buffer: [UInt8] = []
        for (ad, change) in changes {
            if let stored = change.stored, stored.events == change.events { continue }
            buffer.removeAll(keepingCapacity: true)
            AdState.encode(change.events, into: &buffer)
            rules.accumulate(change.events, into: &delta)
            if let stored = change.stored {
                rules.accumulate(stored.events, into: &removed)
                changedRows.append(bytes: stored.row)
                changedStates.append(bytes: buffer)
                updated += 1
            } else {
                newAds.append(ad)
                newStates.append(bytes: buffer)
                inserted += 1
            }
        }
        if inserted > 0 { try connection.query(AdStateSQL.insert, [newAds.parameter, newStates.parameter]) }
        if updated > 0 {
            try connection.query(rowKey.update, [changedRows.parameter, changedStates.parameter])
        }
        delta.subtract(removed)
        delta.removeZeros()
        try ProjectionWriter.apply(delta, on: connection)
    }

    /// The `high_rate` group of an event, when its client is known.
    private static func group(of l: LogBatch.Logged) -> ClientGroup? {
        guard let agent = l.userAgent, let address = l.addressBytes else { return nil }
        return ClientGroup(minute: l.receivedAt.microseconds / ClientGroup.microsecondsPerMinute, userAgent: agent, address: address)
    }

    /// The stored states of `ads` (those that have one), each unchanged so far.
    private static func load(_ ads: Set<String>, rowKey: RowKey, strings: inout StringTable,
                             on connection: Connection) throws -> [String: Change] {
        guard !ads.isEmpty else { return [:] }
        var requestIds = BinaryArray(.text, capacity: ads.count)
        for ad in ads { requestIds.append(ad) }
        let stored = try connection.query(rowKey.load, [requestIds.parameter],
                                          binaryResults: true)
        var out: [String: Change] = [:]
        out.reserveCapacity(stored.rowCount)
        for r in 0..<stored.rowCount {
            let ad = String(decoding: stored.bytes(r, 1), as: UTF8.self)
            guard let events = AdState.decode(stored.bytes(r, 2), strings: &strings) else {
                throw ProjectorError.unreadableAdState(requestId: ad)
            }
            out[ad] = Change(stored: (Array(stored.bytes(r, 0)), events), events: events)
        }
        return out
    }
}

enum AdStateSQL {
    /// Binary columns: 0 ctid (the row's place, for the update), 1 request_id, 2 events.
    static let load = "SELECT ctid, request_id, events FROM ad_state WHERE request_id = ANY($1::text[])"

    /// `load` where a ctid names no row across shards (Citus): the key is the request id.
    static let loadByRequestId = "SELECT request_id, request_id, events FROM ad_state WHERE request_id = ANY($1::text[])"

    static let insert = "INSERT INTO ad_state (request_id, events) SELECT * FROM unnest($1::text[], $2::bytea[])"

    /// By the ctid read in the same transaction: no index descent, and the projector lock
    /// (advisory lock and the `projection_state` row) keeps every other writer away meanwhile.
    static let update = """
        UPDATE ad_state AS s SET events = u.e FROM unnest($1::tid[], $2::bytea[]) AS u(t, e) WHERE s.ctid = u.t
        """

    /// `update` by request id (Citus: each shard finds its rows by its primary key).
    static let updateByRequestId = """
        UPDATE ad_state AS s SET events = u.e FROM unnest($1::text[], $2::bytea[]) AS u(r, e) WHERE s.request_id = u.r
        """
}

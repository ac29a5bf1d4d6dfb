/// The projector's memory of every ad and load (`ad_state`): what one step reads from it,
/// computes, and writes back.
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

    /// One state a step changes: as stored (if at all) and what it becomes.
    private struct Change {
        /// The row's key (`RowKey`) and its events as stored; `nil` for a state new to the projections.
        var stored: (row: [UInt8], events: [AdEvent])?
        var events: [AdEvent]
    }

    /// The states of one step, by key (an ad's request id or a load's id).
    private typealias Changes = [String: Change]

    /// The step's events that their states do not hold yet, with their key. A list rather than
    /// a dictionary: nothing looks a key up in it, and a label is written into it in place (a
    /// dictionary's values, written by index, would be copied whole first).
    private typealias Fresh = [(key: String, logged: [LogBatch.Logged])]

    /// Recomputes every ad and load of `batch`, and every one whose events the step labels
    /// `high_rate` after the fact: subtracts its old contribution, adds its new one, and writes
    /// the new states and the changed projection rows (in the caller's transaction).
    ///
    /// An event a state already holds is a retry the log stored again because retention forgot
    /// its id with its partition (`ad_state` is kept): it changes nothing, and counts in no group.
    /// Returns the impressions it labelled (an earlier step's relabelled `high_rate` too) and
    /// those it left unlabelled. The changed projection rows are written in parts of at most
    /// `rowsPerWrite` rows (`ProjectionChanges`).
    @discardableResult
    static func project(_ batch: LogBatch, inbox: [InboxEntry] = [], routing: inout ShardRouting, rules: AdContribution, labeller: IVTLabeller,
                        rowKey: RowKey, rowsPerWrite: Int, strings: inout StringTable, on connection: Connection) throws -> ImpressionTally {
        var tally = ImpressionTally()
        // Load references whose load another group writes: labelled here with the step's other
        // events (their client is known only here), then left in that group's inbox.
        let foreign = routing.isWhole ? [] : try routing.foreign(batch.events.compactMap { key, logged in
            logged.allSatisfy(\.event.isLoadReference) ? key : nil
        }, on: connection)
        var keys = Set(batch.events.keys)
        keys.subtract(foreign)
        for entry in inbox { keys.insert(entry.key) }
        var changes = try load(keys, rowKey: rowKey, strings: &strings, on: connection)
        // The inbox's references first: a relabel, in the inbox or of this step, may name them.
        receive(inbox, into: &changes)
        var fresh = freshEvents(of: batch, in: changes)
        try label(&fresh, by: labeller, on: connection)
        if let limit = labeller.rules.maxEventsPerClientMinute {
            try applyHighRate(limit: limit, to: &fresh, and: &changes, tally: &tally, routing: &routing, rowKey: rowKey,
                              strings: &strings, on: connection)
            if routing.distributed {
                // Shards projected by groups, running or having run, may be far apart in time.
                try ClientMinutes.forgetBehindEveryShard(on: connection)
            } else if batch.newestReceipt.microseconds > 0 {
                try ClientMinutes.forget(before: batch.newestReceipt.microseconds / ClientGroup.microsecondsPerMinute - ClientMinutes.keptMinutes,
                                         on: connection)
            }
        }
        relabel(inbox, in: &changes, tally: &tally)
        for (key, logged) in fresh {
            for l in logged { tally.count(l.event) }
            if foreign.contains(key) {
                for l in logged { routing.send(reference: l.event, to: key) }
                continue
            }
            changes[key, default: Change(stored: nil, events: [])].events += logged.map(\.event)
        }
        try write(changes, rules: rules, rowKey: rowKey, rowsPerWrite: rowsPerWrite,
                  rowsLock: routing.isWhole ? nil : ProjectorSQL.rowsLock, on: connection)
        return tally
    }

    /// Adds the inbox's load references to their loads' states (an event a state holds already
    /// is not added again: the inbox is written once per log row, but a state is the judge).
    private static func receive(_ inbox: [InboxEntry], into changes: inout Changes) {
        for entry in inbox {
            guard case .reference(let event) = entry.content else { continue }
            var change = changes[entry.key] ?? Change(stored: nil, events: [])
            let identity = EventIdentity(event)
            guard !change.events.contains(where: { EventIdentity($0) == identity }) else { continue }
            change.events.append(event)
            changes[entry.key] = change
        }
    }

    /// Labels `high_rate` the events the inbox's relabels name (those not labelled already).
    private static func relabel(_ inbox: [InboxEntry], in changes: inout Changes, tally: inout ImpressionTally) {
        var byKey: [String: Set<PackedUUID>] = [:]
        for entry in inbox {
            if case .relabel(let id) = entry.content { byKey[entry.key, default: []].insert(id) }
        }
        for (key, ids) in byKey where changes[key] != nil {
            labelHighRate(ids, in: &changes[key]!, tally: &tally)
        }
    }

    /// Labels `high_rate` the events of `change` that `ids` names and that have no label yet,
    /// and counts them.
    private static func labelHighRate(_ ids: Set<PackedUUID>, in change: inout Change, tally: inout ImpressionTally) {
        for i in change.events.indices where change.events[i].label == nil && ids.contains(change.events[i].id) {
            change.events[i].label = .highRate
            tally.count(change.events[i])
        }
    }

    /// The step's events that their states do not hold yet (an event is known to a state by its
    /// id and whether it is a load reference).
    private static func freshEvents(of batch: LogBatch, in changes: Changes) -> Fresh {
        var fresh: Fresh = []
        fresh.reserveCapacity(batch.events.count)
        for (key, logged) in batch.events {
            // Most of a step's keys are new to the projections: their events are all fresh, and
            // the batch's array is shared until a label is written into it.
            guard let stored = changes[key]?.stored?.events, !stored.isEmpty else {
                fresh.append((key, logged))
                continue
            }
            let known = Set(stored.lazy.map(EventIdentity.init))
            let new = logged.filter { !known.contains(EventIdentity($0.event)) }
            if !new.isEmpty { fresh.append((key, new)) }
        }
        return fresh
    }

    /// Labels the fresh events by their clients: `declared_bot`, then `datacenter`.
    private static func label(_ fresh: inout Fresh, by labeller: IVTLabeller, on connection: Connection) throws {
        var agents = Set<Int32>()
        for (_, logged) in fresh { for l in logged { if let a = l.userAgent { agents.insert(a) } } }
        try labeller.learn(userAgents: agents, on: connection)
        setLabels(of: &fresh) { labeller.label(userAgent: $0.userAgent, address: $0.address, channel: $0.channel) }
    }

    /// Gives each fresh event the label `labelOf` says, written only where it changes: most
    /// events keep none, and their arrays stay shared with the batch rather than copied.
    private static func setLabels(of fresh: inout Fresh, _ labelOf: (LogBatch.Logged) -> IVTLabel?) {
        for i in fresh.indices {
            for j in fresh[i].logged.indices {
                let label = labelOf(fresh[i].logged[j])
                if label != fresh[i].logged[j].event.label { fresh[i].logged[j].event.label = label }
            }
        }
    }

    /// `high_rate`: the step's events counted into their groups (a load reference is its
    /// `ad_loaded` again, a member but not a second event); a group over the limit labels all
    /// its events, those of earlier steps too, whose states are loaded into `changes`.
    ///
    /// On a distributed log a member may be a load reference still in the inbox: committed by
    /// another group's step after this step read the inbox (the count waited for that step's
    /// lock on the minute), or past the part of the inbox this step read. Its label goes to
    /// the inbox of the reference's shard, behind the reference, and a later step folds both.
    private static func applyHighRate(limit: Int, to fresh: inout Fresh, and changes: inout Changes,
                                      tally: inout ImpressionTally, routing: inout ShardRouting, rowKey: RowKey,
                                      strings: inout StringTable, on connection: Connection) throws {
        var added: [ClientGroup: GroupAddition] = [:]
        for (key, logged) in fresh {
            for l in logged {
                guard let group = group(of: l) else { continue }
                if !l.event.isLoadReference { added[group, default: GroupAddition()].events += 1 }
                added[group, default: GroupAddition()].members.append(GroupMember(requestId: key, id: l.event.id))
            }
        }
        let (overLimit, relabel) = try ClientMinutes.count(added, limit: limit, concurrently: !routing.isWhole, on: connection)
        setLabels(of: &fresh) { IVTLabel.of(client: $0.event.label, group: group(of: $0), overLimit: overLimit.contains) }
        guard !relabel.isEmpty else { return }
        let missing = Set(relabel.map(\.requestId)).subtracting(changes.keys)
        // Another group's states get their labels through its inbox.
        let foreign = try routing.foreign(missing, on: connection)
        changes.merge(try load(missing.subtracting(foreign), rowKey: rowKey, strings: &strings, on: connection)) { a, _ in a }
        var notYetFolded: [String: Set<PackedUUID>] = [:]
        for (key, members) in Dictionary(grouping: relabel, by: \.requestId).mapValues({ Set($0.map(\.id)) }) {
            if foreign.contains(key) {
                for id in members { routing.send(relabel: id, of: key) }
                continue
            }
            if changes[key] != nil { labelHighRate(members, in: &changes[key]!, tally: &tally) }
            if routing.distributed {
                let unseen = members.subtracting(changes[key]?.events.map(\.id) ?? [])
                if !unseen.isEmpty { notYetFolded[key] = unseen }
            }
        }
        guard !notYetFolded.isEmpty else { return }
        try routing.lookUp(notYetFolded.keys, on: connection)
        for (key, ids) in notYetFolded {
            for id in ids { routing.send(relabel: id, of: key) }
        }
    }

    /// Writes the changed states and what their change does to the projection tables.
    ///
    /// - Parameter rowsLock: the advisory lock taken before the first projection row is written,
    ///   when projectors of other groups write them too (their half-day rows are read, added to
    ///   and written back); held until the step commits.
    private static func write(_ changes: Changes, rules: AdContribution, rowKey: RowKey, rowsPerWrite: Int, rowsLock: String?,
                              on connection: Connection) throws {
        var rows = ProjectionChanges(rowsPerWrite: rowsPerWrite, lock: rowsLock)
        var newKeys = BinaryArray(.text), newStates = BinaryArray(.bytea)
        var changedRows = BinaryArray(rowKey.element), changedStates = BinaryArray(.bytea)
        var buffer: [UInt8] = []
        for (key, change) in changes {
            if let stored = change.stored, stored.events == change.events { continue }
            buffer.removeAll(keepingCapacity: true)
            AdState.encode(change.events, into: &buffer)
            rules.accumulate(change.events, into: &rows.added)
            if let stored = change.stored {
                rules.accumulate(stored.events, into: &rows.removed)
                changedRows.append(bytes: stored.row)
                changedStates.append(bytes: buffer)
            } else {
                newKeys.append(key)
                newStates.append(bytes: buffer)
            }
            try rows.writeIfFull(on: connection)
        }
        if newKeys.count > 0 { try connection.query(AdStateSQL.insert, [newKeys.parameter, newStates.parameter]) }
        if changedRows.count > 0 { try connection.query(rowKey.update, [changedRows.parameter, changedStates.parameter]) }
        try rows.write(on: connection)
        // The step's writes of shared rows after this one (checkpoint counts, marks) come under
        // the lock too, whether or not it changed a projection row.
        try rows.lockOnce(on: connection)
    }

    /// How a state tells its events apart: an `ad_loaded` and its load reference share an id
    /// when an ad and its load share a key.
    private struct EventIdentity: Hashable {
        var id: PackedUUID
        var isLoadReference: Bool

        init(_ e: AdEvent) {
            id = e.id
            isLoadReference = e.isLoadReference
        }
    }

    /// The `high_rate` group of an event, when its client is known.
    private static func group(of l: LogBatch.Logged) -> ClientGroup? {
        ClientGroup(receivedAt: l.receivedAt, userAgent: l.userAgent, address: l.addressBytes)
    }

    /// The stored states of `ads` (those that have one), each unchanged so far.
    private static func load(_ ads: Set<String>, rowKey: RowKey, strings: inout StringTable,
                             on connection: Connection) throws -> Changes {
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

/// What a step projected, for the projector's metrics: impressions by the invalid-traffic label
/// they carry (`nil`: none), and the valid events of loads by type (`ad_loaded`: those that name
/// their load), whose ratios are the fill and failure rates an alert watches. Test events are
/// left out, as the reports leave them out unless asked.
struct ImpressionTally: Sendable {
    private(set) var counts: [IVTLabel?: Int] = [:]
    private(set) var loadEvents: [EventType: Int] = [:]

    mutating func count(_ e: AdEvent) {
        guard !e.isTest else { return }
        if e.type == .impression { counts[e.label, default: 0] += 1 }
        if e.label == nil, e.isLoadPart { loadEvents[e.type, default: 0] += 1 }
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

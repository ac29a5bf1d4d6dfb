/// One step's events from the log, grouped by ad: the binary rows of `ProjectorSQL.nextEvents`.
struct LogBatch {
    /// The projected events of each ad the step touches (video pause, mute and unmute left out).
    var events: [String: [AdEvent]] = [:]
    /// The position of the step's last row (projected or not): the next checkpoint.
    var lastTx: UInt64 = 0
    var lastSeq: Int64 = 0

    init(_ rows: QueryResult, strings: inout StringTable) throws {
        events.reserveCapacity(rows.rowCount)
        for r in 0..<rows.rowCount {
            let read: AdEventRow?
            do { read = try AdEventRow.projected(AdEventRow.values(of: rows, row: r)) } catch { throw Self.malformed(error.column.name, rows, r) }
            guard let row = read else { continue }
            events[row.requestIdString, default: []].append(row.event(strings: &strings))
        }
        let last = rows.rowCount - 1
        guard let tx = ByteReader.int64(rows.bytes(last, Self.txColumn)), let seq = ByteReader.int64(rows.bytes(last, Self.seqColumn)) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "projector: a log row without tx or seq")
        }
        (lastTx, lastSeq) = (UInt64(bitPattern: tx), seq)
    }

    /// The columns `ProjectorSQL.nextEvents` selects after the ad event's.
    static let txColumn = AdEventColumn.allCases.count, seqColumn = AdEventColumn.allCases.count + 1

    /// The row's place in the log, for the error that stops the projector there.
    static func malformed(_ what: String, _ rows: QueryResult, _ row: Int) -> ProjectorError {
        let tx = ByteReader.int64(rows.bytes(row, txColumn)).map { String(UInt64(bitPattern: $0)) } ?? "?"
        let seq = ByteReader.int64(rows.bytes(row, seqColumn)).map { String($0) } ?? "?"
        return .unreadableLogRow(tx: tx, seq: seq, field: what)
    }
}

/// The per-ad memory (`ad_state`): what one step reads from it, computes, and writes back.
enum AdStateStore {
    /// Recomputes every ad of `batch`: subtracts its old contribution, adds its new one, and
    /// writes the ads' new states and the changed day-table rows (in the caller's transaction).
    ///
    /// An id the ad already has is a retry the log stored again because retention forgot its
    /// id with its partition (`ad_state` is kept): it changes nothing.
    static func project(_ batch: LogBatch, rules: AdContribution, strings: inout StringTable, on connection: Connection) throws {
        let ads = Array(batch.events.keys)
        var requestIds = BinaryArray(.text, capacity: ads.count)
        for ad in ads { requestIds.append(ad) }
        let stored = try connection.query(AdStateSQL.load, [requestIds.parameter], binaryResults: true)
        var rowOf: [String: Int] = [:]
        rowOf.reserveCapacity(stored.rowCount)
        for r in 0..<stored.rowCount { rowOf[String(decoding: stored.bytes(r, 1), as: UTF8.self)] = r }

        var delta = Contribution(), removed = Contribution()
        var newAds = BinaryArray(.text, capacity: batch.events.count), newStates = BinaryArray(.bytea, capacity: batch.events.count * 4)
        var changedRows = BinaryArray(.tid, capacity: stored.rowCount), changedStates = BinaryArray(.bytea, capacity: stored.rowCount * 4)
        var inserted = 0, updated = 0
        var buffer: [UInt8] = []
        for ad in ads {
            let added = batch.events[ad]!
            buffer.removeAll(keepingCapacity: true)
            guard let r = rowOf[ad] else {
                rules.accumulate(added, into: &delta)
                AdState.encode(added, into: &buffer)
                newAds.append(ad)
                newStates.append(bytes: buffer)
                inserted += 1
                continue
            }
            guard let before = AdState.decode(stored.bytes(r, 2), strings: &strings) else {
                throw ProjectorError.unreadableAdState(requestId: ad)
            }
            let known = Set(before.lazy.map(\.id))
            let fresh = added.filter { !known.contains($0.id) }
            if fresh.isEmpty { continue }
            let all = before + fresh
            rules.accumulate(before, into: &removed)
            rules.accumulate(all, into: &delta)
            AdState.encode(all, into: &buffer)
            changedRows.append(bytes: stored.bytes(r, 0))
            changedStates.append(bytes: buffer)
            updated += 1
        }
        if inserted > 0 { try connection.query(AdStateSQL.insert, [newAds.parameter, newStates.parameter]) }
        if updated > 0 { try connection.query(AdStateSQL.update, [changedRows.parameter, changedStates.parameter]) }
        delta.subtract(removed)
        delta.removeZeros()
        try ProjectionWriter.apply(delta, on: connection)
    }
}

enum AdStateSQL {
    /// Binary columns: 0 ctid (the row's place, for the update), 1 request_id, 2 events.
    static let load = "SELECT ctid, request_id, events FROM ad_state WHERE request_id = ANY($1::text[])"

    static let insert = "INSERT INTO ad_state (request_id, events) SELECT * FROM unnest($1::text[], $2::bytea[])"

    /// By the ctid read in the same transaction: no index descent, and the projector lock
    /// (advisory lock and the `projection_state` row) keeps every other writer away meanwhile.
    static let update = """
        UPDATE ad_state AS s SET events = u.e FROM unnest($1::tid[], $2::bytea[]) AS u(t, e) WHERE s.ctid = u.t
        """
}

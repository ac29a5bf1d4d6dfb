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
            guard let type = Self.label(rows.bytes(r, 2), in: Self.types) else { throw Self.malformed("type", rows, r) }
            guard AdEvent.isProjected(type) else { continue }
            let idBytes = rows.bytes(r, 1)
            guard idBytes.count == 16, let local = ByteReader.int64(rows.bytes(r, 3)),
                  let source = Self.label(rows.bytes(r, 7), in: Self.sources)
            else { throw Self.malformed("id, corrected_at or source", rows, r) }
            let event = AdEvent(id: UUIDText(binary: idBytes), type: type,
                                correctedAt: Timestamp(microseconds: local &+ BinaryArray.postgresEpochOffset),
                                adUnit: strings.string(rows.bytes(r, 4)), formatId: strings.string(rows.bytes(r, 5)),
                                assetKey: rows.isNull(r, 6) ? nil : strings.string(rows.bytes(r, 6)), source: source,
                                adapter: rows.isNull(r, 8) ? nil : strings.string(rows.bytes(r, 8)),
                                eea: Self.bool(rows.bytes(r, 9)), reservation: Self.bool(rows.bytes(r, 10)),
                                test: Self.bool(rows.bytes(r, 11)))
            events[String(decoding: rows.bytes(r, 0), as: UTF8.self), default: []].append(event)
        }
        let last = rows.rowCount - 1
        guard let tx = ByteReader.int64(rows.bytes(last, 12)), let seq = ByteReader.int64(rows.bytes(last, 13)) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "projector: a log row without tx or seq")
        }
        (lastTx, lastSeq) = (UInt64(bitPattern: tx), seq)
    }

    static let types = EventType.allCases.map { (Array($0.rawValue.utf8), $0) }
    static let sources = EventSource.allCases.map { (Array($0.rawValue.utf8), $0) }

    /// The case whose label (an enum's binary value is its label) equals `bytes`.
    static func label<T>(_ bytes: UnsafeRawBufferPointer, in labels: [([UInt8], T)]) -> T? {
        for (label, value) in labels where label.count == bytes.count && label.elementsEqual(bytes) { return value }
        return nil
    }

    static func bool(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count == 1 && bytes[0] != 0
    }

    /// The row's place in the log, for the error that stops the projector there.
    static func malformed(_ what: String, _ rows: QueryResult, _ row: Int) -> ProjectorError {
        let tx = ByteReader.int64(rows.bytes(row, 12)).map { String(UInt64(bitPattern: $0)) } ?? "?"
        let seq = ByteReader.int64(rows.bytes(row, 13)).map { String($0) } ?? "?"
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

/// One step's events from the log, grouped by the key of the state they change (an ad's request
/// id, or a load's id): the binary rows of `ProjectorSQL.nextEvents` (or of
/// `CitusSQL.nextEvents`, one result per worker, each row ending with its shard's id). An
/// `ad_loaded` that names its load is in two groups: its ad's, and as a load reference its load's.
struct LogBatch {
    /// An event with the client that sent it (what the invalid-traffic rules read).
    struct Logged {
        var event: AdEvent
        var userAgent: Int32?
        var address: IPAddress?
        /// The binary `inet` of `address`, the key of its `high_rate` group.
        var addressBytes: [UInt8]?
        var receivedAt: Timestamp
        /// Sent to `POST /v1/events` or fetched as a beacon: the rule set's app exemptions apply to the first only.
        var channel: EventChannel
    }

    /// The last row a step read from one shard, and how many it read there.
    struct ShardEnd {
        var tx: UInt64
        var seq: Int64
        var rows: Int
        /// The newest receipt among the shard's rows.
        var newestReceipt: Timestamp
    }

    /// The events of each ad and load the step touches, by state key.
    var events: [String: [Logged]] = [:]
    /// The position of the step's last row: the next checkpoint (single node).
    var lastTx: UInt64 = 0
    var lastSeq: Int64 = 0
    /// Each shard's last row: its next checkpoint (Citus layout).
    var shardEnds: [Int64: ShardEnd] = [:]
    /// The newest receipt among the rows.
    var newestReceipt = Timestamp(microseconds: 0)

    init(_ results: [QueryResult], shardColumn: Bool, strings: inout StringTable) throws {
        events.reserveCapacity(results.reduce(0) { $0 + $1.rowCount })
        for rows in results {
            for r in 0..<rows.rowCount {
                let row: AdEventRow
                do { row = try AdEventRow(AdEventRow.values(of: rows, row: r)) } catch { throw Self.malformed(error.column.name, rows, r) }
                let address = row.clientAddress
                let logged = Logged(event: row.event(strings: &strings), userAgent: row.userAgentId, address: address,
                                    addressBytes: address != nil ? row.clientIP.map { Array($0) } : nil, receivedAt: row.receivedAt,
                                    channel: row.channel)
                events[row.requestIdString, default: []].append(logged)
                if let load = row.referencedLoad {
                    var reference = logged
                    reference.event = logged.event.loadReference
                    events[String(decoding: load, as: UTF8.self), default: []].append(reference)
                }
                newestReceipt = max(newestReceipt, row.receivedAt)
                guard shardColumn else { continue }
                // Rows come shard by shard in log order: a shard's last row is its newest.
                let (tx, seq) = try Self.position(rows, r)
                guard let shard = ByteReader.int64(rows.bytes(r, Self.shardColumn)) else {
                    throw DatabaseError(.unexpectedResult, serverMessage: "projector: a log row without its shard")
                }
                let before = shardEnds[shard]
                shardEnds[shard] = ShardEnd(tx: tx, seq: seq, rows: (before?.rows ?? 0) + 1,
                                            newestReceipt: max(before?.newestReceipt ?? row.receivedAt, row.receivedAt))
            }
        }
        if let rows = results.last(where: { $0.rowCount > 0 }) {
            (lastTx, lastSeq) = try Self.position(rows, rows.rowCount - 1)
        }
    }

    /// The place in the log of a row `ProjectorSQL.nextEvents` read.
    static func position(_ rows: QueryResult, _ row: Int) throws -> (tx: UInt64, seq: Int64) {
        guard let tx = ByteReader.int64(rows.bytes(row, txColumn)), let seq = ByteReader.int64(rows.bytes(row, seqColumn)) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "projector: a log row without tx or seq")
        }
        return (UInt64(bitPattern: tx), seq)
    }

    /// The columns `ProjectorSQL.nextEvents` selects after the ad event's.
    static let txColumn = AdEventColumn.allCases.count, seqColumn = AdEventColumn.allCases.count + 1
    static let shardColumn = AdEventColumn.allCases.count + 2

    /// The row's place in the log, for the error that stops the projector there.
    static func malformed(_ what: String, _ rows: QueryResult, _ row: Int) -> ProjectorError {
        let tx = ByteReader.int64(rows.bytes(row, txColumn)).map { String(UInt64(bitPattern: $0)) } ?? "?"
        let seq = ByteReader.int64(rows.bytes(row, seqColumn)).map { String($0) } ?? "?"
        return .unreadableLogRow(tx: tx, seq: seq, field: what)
    }
}

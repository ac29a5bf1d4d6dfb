/// One group of submissions as the append statement's column arrays.
///
/// Within a group an id is sent once (its first occurrence); later occurrences, and ids
/// the database already holds, come back as duplicates of the submission that carried them.
struct AppendBatch {
    /// The index in its submission of every event sent (an id's first occurrence), submission
    /// after submission; `sent[s]` is submission `s`'s part of it.
    private var firstOccurrence: [Int] = []
    private var sent: [Range<Int>] = []
    private let submissions: [[TrackingEvent]]
    private let keyNames: [String]
    /// The distinct user agents the group's events carry.
    private(set) var userAgents: Set<String> = []

    init(_ group: [(events: [TrackingEvent], keyName: String)]) {
        submissions = group.map(\.events)
        keyNames = group.map(\.keyName)
        let total = group.reduce(0) { $0 + $1.events.count }
        var seen = Set<PackedUUID>(minimumCapacity: total)
        firstOccurrence.reserveCapacity(total)
        sent.reserveCapacity(group.count)
        for submission in group {
            let start = firstOccurrence.count
            for (i, e) in submission.events.enumerated() where seen.insert(e.id).inserted {
                firstOccurrence.append(i)
                if let agent = e.userAgent { userAgents.insert(agent) }
            }
            sent.append(start..<firstOccurrence.count)
        }
    }

    /// Every event sent, in the group's order, with the key name of its submission.
    private func forEachSent(_ body: (TrackingEvent, String) -> Void) {
        for (s, range) in sent.enumerated() {
            for i in firstOccurrence[range] { body(submissions[s][i], keyNames[s]) }
        }
    }

    /// The conflict-checking statement's parameters ($1 to $26): every column as an array, the
    /// user agents given by their numbers in `user_agents` (`ids` holds every one of `userAgents`).
    func parameters(userAgentIds ids: [String: Int32]) -> [Parameter] {
        var columns = LogColumnArrays(capacity: firstOccurrence.count)
        writeRows(into: &columns, userAgentIds: ids)
        return columns.parameters
    }

    /// The plain append's data: the ids for `event_ids`, ascending (`EventLogSQL.appendCheckingConflicts`
    /// says why), and the log's rows in the group's order, both as binary COPY data.
    func copyData(userAgentIds ids: [String: Int32]) -> (ids: [UInt8], events: [UInt8]) {
        var rows = BinaryCopyRows(capacity: firstOccurrence.count * 320)
        writeRows(into: &rows, userAgentIds: ids)
        var sorted: [PackedUUID] = []
        sorted.reserveCapacity(firstOccurrence.count)
        forEachSent { e, _ in sorted.append(e.id) }
        sorted.sort()
        var idRows = BinaryCopyRows(capacity: sorted.count * 22)
        for id in sorted {
            idRows.beginRow(fields: 1)
            idRows.append(id)
        }
        return (idRows.finish(), rows.finish())
    }

    /// Every event sent as a row of the log, its fields in the log's column order.
    private func writeRows(into rows: inout some LogRowWriter, userAgentIds ids: [String: Int32]) {
        forEachSent { e, key in
            rows.beginRow()
            rows.append(e.id)
            rows.append(e.type.rawValue)
            rows.append(e.logKey)
            rows.append(e.adUnit)
            rows.append(e.formatId)
            rows.append(e.assetKey)
            rows.append(e.clickAction?.rawValue)
            rows.append(e.source.rawValue)
            rows.append(e.adapter)
            rows.append(e.eea)
            rows.append(e.reservation)
            rows.append(e.test)
            rows.append(jsonb: e.attributesJSON)
            rows.append(e.occurredAt)
            rows.append(e.sentAt)
            rows.append(e.receivedAt)
            rows.append(e.correctedAt)
            rows.append(key)
            rows.append(e.clientIP)
            rows.append(e.userAgent.flatMap { ids[$0] })
            rows.append(e.loadId)
            rows.append(e.adsRequested.map { Int32($0) })
            rows.append(e.latencyMs.map { Int32($0) })
            rows.append(e.errorCode?.rawValue)
            rows.append(e.result?.rawValue)
            rows.append(e.position.map { Int32($0) })
        }
    }

    /// How many ids the write sends (each id once).
    var sentCount: Int { firstOccurrence.count }

    /// How many of submission `s`'s events were stored by this write (its own part of the
    /// group only: answering every submission costs one pass over the group, not one each).
    func outcome(of s: Int, stored: StoredIds) -> AppendOutcome {
        let mine = firstOccurrence[sent[s]]
        let count = switch stored {
        case .all: mine.count
        case .only(let ids): mine.reduce(0) { ids.contains(submissions[s][$1].id) ? $0 + 1 : $0 }
        }
        return AppendOutcome(stored: count, duplicates: submissions[s].count - count)
    }
}

/// Where the log's rows go, their fields in the log's column order (`EventLogSQL.columns`):
/// the COPY rows of the plain append, or the column arrays of the conflict-checking statement.
/// `AppendBatch.writeRows` lists the fields once for both.
private protocol LogRowWriter: BinaryFieldWriter {
    mutating func beginRow()
}

extension BinaryCopyRows: LogRowWriter {
    fileprivate mutating func beginRow() { beginRow(fields: Int16(EventLogSQL.columnCount)) }
}

/// Rows of the log as one binary array per column: each field goes to the next column's array.
private struct LogColumnArrays: LogRowWriter {
    private var arrays: [BinaryArray]
    private var column = 0

    init(capacity: Int) {
        let elements: [BinaryArray.Element] = [.uuid, .text, .text, .text, .text, .text, .text, .text, .text, .bool, .bool, .bool,
                                               .jsonb, .timestamptz, .timestamptz, .timestamptz, .timestamptz, .text, .inet, .int4,
                                               .text, .int4, .int4, .text, .text, .int4]
        assert(elements.count == EventLogSQL.columnCount)
        arrays = elements.map { BinaryArray($0, capacity: capacity) }
    }

    var parameters: [Parameter] { arrays.map(\.parameter) }

    mutating func beginRow() { column = 0 }

    /// Writes the next field into its column's array.
    private mutating func next(_ write: (inout BinaryArray) -> Void) {
        write(&arrays[column])
        column += 1
    }

    mutating func appendNull() { next { $0.appendNull() } }
    mutating func append(_ value: Bool) { next { $0.append(value) } }
    mutating func append(_ value: Int32) { next { $0.append(value) } }
    mutating func append(_ value: Int64) { next { $0.append(value) } }
    mutating func append(_ value: String) { next { $0.append(value) } }
    mutating func append(jsonb value: String) { next { $0.append(jsonb: value) } }
    mutating func append(microsecondsSince1970 value: Int64) { next { $0.append(microsecondsSince1970: value) } }
    mutating func append(uuid high: UInt64, _ low: UInt64) { next { $0.append(uuid: high, low) } }
    mutating func append(bytes value: some Collection<UInt8>) { next { $0.append(bytes: value) } }
}

/// What a group's write stored.
enum StoredIds {
    /// Every id it sent: the plain append (`EventLogSQL.appendByCopy`) commits all or nothing.
    case all
    /// The ids the conflict-checking statement (`EventLogSQL.appendCheckingConflicts`) returned.
    case only(Set<PackedUUID>)
}

/// How a group is written: the plain append (two binary COPYs) while groups meet no stored
/// id, the conflict-checking statement for a while after one did.
///
/// Almost every group holds only new ids (a stored id comes back only when a client retries
/// a request whose answer it lost), and the plain append costs PostgreSQL far less than
/// `ON CONFLICT DO NOTHING` with the join that picks the new ids (docs/PERFORMANCE.md).
/// A plain append that meets a stored id fails whole and is written again with the
/// conflict-checking statement; during a burst of retries every group would pay twice, so
/// after a conflict the next `cautiousGroups` groups go straight to that statement, and
/// each of them that met a stored id starts the count again.
struct AppendStrategy: Sendable {
    static let cautiousGroups = 32
    /// Groups still to write with the conflict-checking statement.
    private(set) var remainingCautious = 0

    /// Whether the next group tries the plain append.
    var triesPlainAppend: Bool { remainingCautious == 0 }

    /// Records a group's write: whether it met an id the log already held.
    mutating func record(metStoredId: Bool) {
        remainingCautious = metStoredId ? Self.cautiousGroups : max(remainingCautious - 1, 0)
    }
}

enum EventLogSQL {
    /// Inserts a group: ids new to `event_ids` go into the log, the rest are duplicates.
    /// Returns the ids that were stored.
    ///
    /// The ids go into `event_ids` in ascending order, whatever order the group has: an insert
    /// that meets an id another transaction is inserting waits for it, so two writes of the same
    /// ids (a retry racing its first attempt, on two nodes) in different orders each held an id
    /// the other waited for, a deadlock (40P01, a 503 after a second's stall). In one global
    /// order the second write waits for the first and finds its ids stored. The log keeps
    /// the group's own order (`ord`).
    ///
    /// The arrays are unnested once, straight into the log's insert: `event_ids` reads only the
    /// id array, so no 18-column copy of the group is materialised for two readers (as a CTE
    /// both parts read was). Binary result: the stored ids' 16 bytes each.
    static let appendCheckingConflicts = PreparedStatement(name: "tracker_append_checking_conflicts", sql: """
        WITH fresh AS (
            INSERT INTO event_ids (id) SELECT id FROM unnest($1::uuid[]) AS u(id) ORDER BY id
            ON CONFLICT DO NOTHING RETURNING id
        )
        \(insertIntoLog) WITH ORDINALITY AS i(\(columns), ord)
        WHERE i.id IN (SELECT id FROM fresh)
        ORDER BY i.ord
        RETURNING id
        """)

    /// The plain append, the cheap path of `AppendStrategy`, for a group whose ids are all new:
    /// a COPY of the ids into `event_ids`, then one of the rows into the log, sent as one query
    /// string, so one implicit transaction (`AppendBatch.copyData` makes their data).
    /// It fails whole with a unique violation (23505, `event_ids_pkey`) when an id is stored
    /// already, and then nothing of the group is stored.
    ///
    /// COPY, unlike `INSERT … SELECT FROM unnest(…)`, writes the rows a page at a time (one WAL
    /// record per page of the log, not one per row), reads binary fields instead of arrays,
    /// and materialises nothing: no `ON CONFLICT` pre-check, no join, no result either
    /// (docs/PERFORMANCE.md, "The append as binary COPY"). The ids go in ascending order, for
    /// the reason given at `appendCheckingConflicts`; the log's rows in the group's order, which
    /// their sequence numbers follow. `markAppend` follows, in the same transaction.
    static let appendByCopy = """
        COPY event_ids (id) FROM STDIN (FORMAT binary); COPY events (\(columns)) FROM STDIN (FORMAT binary); \(markAppend)
        """

    /// The append's mark, in every transaction that writes the log, after its rows: on a
    /// distributed log it records the transaction for reports' read-your-writes check
    /// (`CitusSQL.caughtUp`); on one node it does nothing (sql/019_append_marks.sql). After the
    /// rows, because the function starts to mark when the log is distributed: an append that
    /// found it not marking yet took its transaction id before that (`CitusSQL.drained`).
    static let markAppend = "SELECT tracker_mark_append()"

    /// The log's columns, in the order of `AppendBatch.parameters` ($1 to $26) and of a row of the log's COPY in `appendByCopy`.
    /// `request_id` holds `TrackingEvent.logKey`: a load's events are stored under the load's id.
    static let columnCount = 26
    private static let columns = """
        id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea, \
        reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name, \
        client_ip, user_agent_id, load_id, ads_requested, latency_ms, error_code, result, position
        """

    /// The insert of a group's rows into the log, up to the alias of the unnested arrays.
    private static let insertIntoLog = """
        INSERT INTO events (\(columns))
        SELECT i.id, i.type::event_type, i.request_id, i.ad_unit, i.format_id, i.asset_key,
               i.click_action::click_action, i.source::event_source, i.adapter, i.eea, i.reservation,
               i.test, i.attributes, i.occurred_at, i.sent_at, i.received_at, i.corrected_at, i.key_name,
               i.client_ip, i.user_agent_id, i.load_id, i.ads_requested, i.latency_ms, i.error_code, i.result, i.position
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::bool[], $11::bool[], $12::bool[],
                    $13::jsonb[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[],
                    $17::timestamptz[], $18::text[], $19::inet[], $20::int4[],
                    $21::text[], $22::int4[], $23::int4[], $24::text[], $25::text[], $26::int4[])
        """

    /// Numbers user agents not yet in `user_agents` and returns the numbers of all of $1. The
    /// agents are inserted in ascending order, so two writers adding the same ones never wait
    /// for each other crosswise. An agent another writer is adding at the same moment is in
    /// neither half of the answer (its row is not in this statement's snapshot): the caller
    /// asks again. The caller commits it asynchronously: the group's own commit, which is
    /// durable, comes after it in the WAL and flushes it too.
    static let numberUserAgents = """
        WITH added AS (
            INSERT INTO user_agents (user_agent)
            SELECT DISTINCT a FROM unnest($1::text[]) AS u(a) ORDER BY a
            ON CONFLICT (user_agent) DO NOTHING
            RETURNING id, user_agent
        )
        SELECT id, user_agent FROM added
        UNION ALL
        SELECT id, user_agent FROM user_agents WHERE user_agent = ANY($1::text[])
        """

    /// The unique index whose 23505 means "an id of the group is stored already".
    static let idConstraint = "event_ids_pkey"

    /// Whether the plain append failed because an id of the group is stored already. On a
    /// distributed log (Citus) a worker's violation arrives as 23505 with the shard's index
    /// (`event_ids_pkey_102336`), or, from a multi-shard insert, as XX000 whose text varies with
    /// the server's language: any XX000 sends the group to the conflict-checking statement,
    /// which stores exactly the new ids, or fails again if the cause was something else.
    static func metStoredId(_ error: DatabaseError) -> Bool {
        switch error.state {
        case .uniqueViolation?:
            guard let constraint = error.constraint else { return false }
            return constraint == idConstraint || constraint.hasPrefix(idConstraint + "_")
        case .internalError?:
            return true
        default:
            return false
        }
    }

    /// Partitions from yesterday to a week ahead (UTC days).
    static let ensurePartitions = """
        SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 1,
                                               (now() AT TIME ZONE 'UTC')::date + 7)
        """
}

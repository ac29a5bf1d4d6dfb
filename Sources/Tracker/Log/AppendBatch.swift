/// One group of submissions as the append statement's column arrays.
///
/// Within a group an id is sent once (its first occurrence); later occurrences, and ids
/// the database already holds, come back as duplicates of the submission that carried them.
struct AppendBatch {
    /// The index in its submission of every event sent (an id's first occurrence), submission
    /// after submission; `sent[s]` is submission `s`'s part of it.
    private var firstOccurrence: [Int] = []
    private var sent: [Range<Int>] = []
    private var submissions: [[TrackingEvent]]
    /// Every column's array but the user agents' numbers, which `parameters(userAgentIds:)` adds.
    private let columns: [Parameter]
    /// The user agent of every event sent, in order (`nil`: none recorded).
    private var userAgentOfRow: [String?] = []
    /// The distinct user agents the group's events carry.
    private(set) var userAgents: Set<String> = []

    init(_ group: [(events: [TrackingEvent], keyName: String)]) {
        submissions = group.map(\.events)
        let total = group.reduce(0) { $0 + $1.events.count }
        var seen = Set<PackedUUID>(minimumCapacity: total)
        var id = BinaryArray(.uuid, capacity: total)
        var type = BinaryArray(.text, capacity: total)
        var requestId = BinaryArray(.text, capacity: total)
        var adUnit = BinaryArray(.text, capacity: total)
        var formatId = BinaryArray(.text, capacity: total)
        var assetKey = BinaryArray(.text, capacity: total)
        var clickAction = BinaryArray(.text, capacity: total)
        var source = BinaryArray(.text, capacity: total)
        var adapter = BinaryArray(.text, capacity: total)
        var eea = BinaryArray(.bool, capacity: total)
        var reservation = BinaryArray(.bool, capacity: total)
        var test = BinaryArray(.bool, capacity: total)
        var attributes = BinaryArray(.jsonb, capacity: total)
        var occurredAt = BinaryArray(.timestamptz, capacity: total)
        var sentAt = BinaryArray(.timestamptz, capacity: total)
        var receivedAt = BinaryArray(.timestamptz, capacity: total)
        var correctedAt = BinaryArray(.timestamptz, capacity: total)
        var keyName = BinaryArray(.text, capacity: total)
        var clientIP = BinaryArray(.inet, capacity: total)
        sent.reserveCapacity(group.count)
        userAgentOfRow.reserveCapacity(total)
        for submission in group {
            let start = firstOccurrence.count
            for (i, e) in submission.events.enumerated() where seen.insert(e.id).inserted {
                firstOccurrence.append(i)
                id.append(e.id)
                type.append(e.type.rawValue)
                requestId.append(e.requestId)
                adUnit.append(e.adUnit)
                formatId.append(e.formatId)
                assetKey.append(e.assetKey)
                clickAction.append(e.clickAction?.rawValue)
                source.append(e.source.rawValue)
                adapter.append(e.adapter)
                eea.append(e.eea)
                reservation.append(e.reservation)
                test.append(e.test)
                attributes.append(e.attributesJSON)
                occurredAt.append(e.occurredAt)
                sentAt.append(e.sentAt)
                receivedAt.append(e.receivedAt)
                correctedAt.append(e.correctedAt)
                keyName.append(submission.keyName)
                clientIP.append(e.clientIP)
                userAgentOfRow.append(e.userAgent)
                if let agent = e.userAgent { userAgents.insert(agent) }
            }
            sent.append(start..<firstOccurrence.count)
        }
        columns = [id, type, requestId, adUnit, formatId, assetKey, clickAction, source, adapter,
                   eea, reservation, test, attributes, occurredAt, sentAt, receivedAt, correctedAt, keyName, clientIP]
            .map(\.parameter)
    }

    /// The append statement's parameters ($1 to $20), the user agents given by their numbers
    /// in `user_agents` (`ids` holds every one of `userAgents`).
    func parameters(userAgentIds ids: [String: Int32]) -> [Parameter] {
        var numbers = BinaryArray(.int4, capacity: userAgentOfRow.count)
        for agent in userAgentOfRow {
            if let agent, let n = ids[agent] { numbers.append(n) } else { numbers.appendNull() }
        }
        return columns + [numbers.parameter]
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

/// What a group's write stored.
enum StoredIds {
    /// Every id it sent: the plain insert (`EventLogSQL.appendPlain`) commits all or nothing.
    case all
    /// The ids the conflict-checking statement (`EventLogSQL.appendCheckingConflicts`) returned.
    case only(Set<PackedUUID>)
}

/// Which statement a group is written with: the plain insert while groups meet no stored id,
/// the conflict-checking one for a while after one did.
///
/// Almost every group holds only new ids (a stored id comes back only when a client retries
/// a request whose answer it lost), and a plain insert costs PostgreSQL a quarter to a third less
/// than `ON CONFLICT DO NOTHING` with the join that picks the new ids (docs/PERFORMANCE.md).
/// A plain insert that meets a stored id fails whole and is written again with the
/// conflict-checking statement; during a burst of retries every group would pay twice, so
/// after a conflict the next `cautiousGroups` groups go straight to that statement, and
/// each of them that met a stored id starts the count again.
struct AppendStrategy: Sendable {
    static let cautiousGroups = 32
    /// Groups still to write with the conflict-checking statement.
    private(set) var remainingCautious = 0

    /// Whether the next group tries the plain insert.
    var triesPlainInsert: Bool { remainingCautious == 0 }

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

    /// Inserts a group whose ids are all new; fails whole with a unique violation (23505,
    /// `event_ids_pkey`) when one is stored already, and then nothing of it is stored.
    ///
    /// The cheap path of `AppendStrategy`: no `ON CONFLICT` pre-check, no join of the stored ids
    /// with the group, no result. The ids go into `event_ids` in ascending order, for the reason
    /// given at `appendCheckingConflicts`; the log keeps the group's order (`ord`: PostgreSQL knows an ordinality
    /// scan is sorted by it, so this adds no sort). PostgreSQL
    /// runs a data-modifying `WITH` to completion even though nothing reads it, so both inserts
    /// happen, in one statement and one commit.
    static let appendPlain = PreparedStatement(name: "tracker_append_plain", sql: """
        WITH ids AS (
            INSERT INTO event_ids (id) SELECT id FROM unnest($1::uuid[]) AS u(id) ORDER BY id
        )
        \(insertIntoLog) WITH ORDINALITY AS i(\(columns), ord)
        ORDER BY i.ord
        """)

    /// The log's columns, in the order of `AppendBatch.parameters` ($1 to $20).
    private static let columns = """
        id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter, eea, \
        reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at, key_name, \
        client_ip, user_agent_id
        """

    /// The insert of a group's rows into the log, up to the alias of the unnested arrays.
    private static let insertIntoLog = """
        INSERT INTO events (\(columns))
        SELECT i.id, i.type::event_type, i.request_id, i.ad_unit, i.format_id, i.asset_key,
               i.click_action::click_action, i.source::event_source, i.adapter, i.eea, i.reservation,
               i.test, i.attributes, i.occurred_at, i.sent_at, i.received_at, i.corrected_at, i.key_name,
               i.client_ip, i.user_agent_id
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::bool[], $11::bool[], $12::bool[],
                    $13::jsonb[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[],
                    $17::timestamptz[], $18::text[], $19::inet[], $20::int4[])
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

    /// Whether the plain insert failed because an id of the group is stored already. On a
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

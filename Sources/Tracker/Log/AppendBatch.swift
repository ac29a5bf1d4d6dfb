/// One group of submissions as the append statement's column arrays.
///
/// Within a group an id is sent once (its first occurrence); later occurrences, and ids
/// the database already holds, come back as duplicates of the submission that carried them.
struct AppendBatch {
    private var firstOccurrence: [(submission: Int, index: Int)] = []
    private var submissions: [[TrackingEvent]]
    let parameters: [Parameter]

    init(_ group: [(events: [TrackingEvent], keyName: String)]) {
        submissions = group.map(\.events)
        let total = group.reduce(0) { $0 + $1.events.count }
        var seen = Set<UUIDText>(minimumCapacity: total)
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
        for (s, submission) in group.enumerated() {
            for (i, e) in submission.events.enumerated() where seen.insert(e.id).inserted {
                firstOccurrence.append((s, i))
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
            }
        }
        parameters = [id, type, requestId, adUnit, formatId, assetKey, clickAction, source, adapter,
                      eea, reservation, test, attributes, occurredAt, sentAt, receivedAt, correctedAt, keyName]
            .map(\.parameter)
    }

    /// How many of submission `s`'s events were stored by this write.
    func outcome(of s: Int, stored: Set<UUIDText>) -> AppendOutcome {
        var count = 0
        for (submission, index) in firstOccurrence where submission == s && stored.contains(submissions[s][index].id) {
            count += 1
        }
        return AppendOutcome(stored: count, duplicates: submissions[s].count - count)
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
    static let append = PreparedStatement(name: "tracker_append", sql: """
        WITH fresh AS (
            INSERT INTO event_ids (id) SELECT id FROM unnest($1::uuid[]) AS u(id) ORDER BY id
            ON CONFLICT DO NOTHING RETURNING id
        )
        INSERT INTO events (id, type, request_id, ad_unit, format_id, asset_key, click_action, source,
                            adapter, eea, reservation, test, attributes, occurred_at, sent_at,
                            received_at, corrected_at, key_name)
        SELECT i.id, i.type::event_type, i.request_id, i.ad_unit, i.format_id, i.asset_key,
               i.click_action::click_action, i.source::event_source, i.adapter, i.eea, i.reservation,
               i.test, i.attributes, i.occurred_at, i.sent_at, i.received_at, i.corrected_at, i.key_name
        FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                    $7::text[], $8::text[], $9::text[], $10::bool[], $11::bool[], $12::bool[],
                    $13::jsonb[], $14::timestamptz[], $15::timestamptz[], $16::timestamptz[],
                    $17::timestamptz[], $18::text[]) WITH ORDINALITY
             AS i(id, type, request_id, ad_unit, format_id, asset_key, click_action, source, adapter,
                  eea, reservation, test, attributes, occurred_at, sent_at, received_at, corrected_at,
                  key_name, ord)
        WHERE i.id IN (SELECT id FROM fresh)
        ORDER BY i.ord
        RETURNING id
        """)

    /// Partitions from yesterday to a week ahead (UTC days).
    static let ensurePartitions = """
        SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 1,
                                               (now() AT TIME ZONE 'UTC')::date + 7)
        """
}

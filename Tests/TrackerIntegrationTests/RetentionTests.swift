import Foundation
import Testing
import Tracker

/// `tracker retention --keep-days N`: old days leave the log, their report rows stay.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct RetentionTests {
    @Test func oldPartitionsAreDroppedAndTheReportsOfTheirDaysDoNotChange() async throws {
        try await withTestDatabase { db in
            try await logOldImpressions(db, daysAgo: 10, count: 5)
            try await logOldImpressions(db, daysAgo: 9, count: 4)
            try await logOldImpressions(db, daysAgo: 3, count: 3)
            try await projectAll(db, expected: 12)
            let before = try await reportRows(db)
            #expect(before.reduce(0) { $0 + ($1["impressions"] as? Int ?? 0) } == 12)

            let dryRun = try await runTracker(["retention", "--keep-days", "7", "--dry-run"], db)
            #expect(dryRun.status == 0)
            let oldest = try await partition(db, daysAgo: 10)
            #expect(dryRun.output.contains(oldest))
            #expect(dryRun.output.contains("would drop"))
            #expect(try await db.scalar("SELECT count(*) FROM events") == "12", "a dry run changes nothing")

            let run = try await runTracker(["retention", "--keep-days", "7"], db)
            #expect(run.status == 0, "\(run.output)")
            for daysAgo in 8...12 {
                #expect(try await partitionExists(db, daysAgo: daysAgo) == false, "\(daysAgo) days ago is dropped")
            }
            for daysAgo in 0...7 {
                #expect(try await partitionExists(db, daysAgo: daysAgo), "\(daysAgo) days ago is kept")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "3")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids") == "3", "the dropped events' ids are forgotten with them")
            #expect(try await db.rows("SELECT events, ids_forgotten FROM retention_runs WHERE events > 0 ORDER BY day")
                    == [["5", "5"], ["4", "4"]])
            #expect(try await reportRows(db) == before, "the projections keep the counts of dropped days")
            // The guard on event_ids still refuses everyone but retention.
            await #expect(throws: DatabaseError.self) { try await db.pool.withConnection { try $0.execute("DELETE FROM event_ids") } }

            let again = try await runTracker(["retention", "--keep-days", "7"], db)
            #expect(again.status == 0)
            #expect(again.output.contains("nothing to drop"))

            // A retry of a dropped event is stored again (its id left with its partition), but the
            // projections still know the id: the reports do not change (PROTOCOL.md 4).
            _ = try await db.rows("""
                WITH old AS (SELECT id, request_id FROM ad_events WHERE corrected_at < now() - interval '8 days' LIMIT 1),
                ids AS (INSERT INTO event_ids SELECT id FROM old RETURNING id)
                INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                                    occurred_at, received_at, corrected_at, key_name)
                SELECT old.id, 'impression', old.request_id, '/1234/home/native', '10063170', 'app', false, false, false,
                       now(), now(), now(), 'app'
                FROM old JOIN ids USING (id)
                """)
            #expect(try await db.scalar("SELECT count(*) FROM events") == "4", "the retry is in the log again")
            try await projectAll(db, expected: 13)
            #expect(try await reportRows(db) == before, "the retry changes no report")
        }
    }

    @Test func aPartitionTheProjectorHasNotReadIsKept() async throws {
        try await withTestDatabase { db in
            try await logOldImpressions(db, daysAgo: 10, count: 5)
            let early = try await runTracker(["retention", "--keep-days", "7"], db)
            #expect(early.status == 0)
            #expect(early.output.contains("5 events not yet projected"))
            #expect(try await partitionExists(db, daysAgo: 10))
            #expect(try await db.scalar("SELECT count(*) FROM events") == "5")

            try await projectAll(db, expected: 5)
            #expect(try await runTracker(["retention", "--keep-days", "7"], db).status == 0)
            #expect(try await partitionExists(db, daysAgo: 10) == false)
            #expect(try await reportRows(db).reduce(0) { $0 + ($1["impressions"] as? Int ?? 0) } == 5)
        }
    }

    @Test func aLongReaderOfTheLogMakesRetentionGiveUpInsteadOfStallingWriters() async throws {
        try await withTestDatabase { db in
            try await logOldImpressions(db, daysAgo: 10, count: 5)
            try await projectAll(db, expected: 5)
            // A reader holds the log's parent table for 15 s; dropping a partition needs it exclusively
            // (five old partitions, each giving up after 2 s, all fall inside it).
            let reader = Task {
                try await db.pool.withConnection { c in
                    try c.execute("BEGIN")
                    try c.execute("LOCK TABLE ONLY events IN ACCESS SHARE MODE")
                    _ = try c.query("SELECT pg_sleep(15)")
                    try c.execute("ROLLBACK")
                }
            }
            try await waitForLockOnTheLog(db)
            let busy = try await runTracker(["retention", "--keep-days", "7"], db)
            #expect(busy.status == 0)
            #expect(busy.output.contains("the log was busy"), "\(busy.output)")
            #expect(try await partitionExists(db, daysAgo: 10))
            #expect(try await db.scalar("SELECT count(*) FROM event_ids") == "5", "nothing is forgotten when the drop gives up")
            try await reader.value
            #expect(try await runTracker(["retention", "--keep-days", "7"], db).status == 0)
            #expect(try await partitionExists(db, daysAgo: 10) == false)
        }
    }

    /// Readers of the log lock its parent, then every partition. Retention used to hold the old
    /// partition exclusively while it waited for the parent: a reader arriving then deadlocked
    /// with it, and PostgreSQL killed retention (seen in CI as a server that never dropped).
    @Test func aReaderArrivingWhileRetentionWaitsForTheLogDoesNotDeadlockIt() async throws {
        try await withTestDatabase { db in
            try await logOldImpressions(db, daysAgo: 10, count: 5)
            try await projectAll(db, expected: 5)
            let reader = Task { () throws -> String? in
                try await db.pool.withConnection { c in
                    try c.execute("BEGIN")
                    try c.execute("LOCK TABLE ONLY events IN ACCESS SHARE MODE")
                    // Wait (at most 10 s) until retention queues for the parent, then read the partitions.
                    try c.execute("""
                        DO $$ BEGIN
                          FOR i IN 1..500 LOOP
                            EXIT WHEN EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'events'::regclass AND NOT granted
                                            AND database = (SELECT oid FROM pg_database WHERE datname = current_database()));
                            PERFORM pg_sleep(0.02);
                          END LOOP;
                        END $$
                        """)
                    let count = try c.query("SELECT count(*) FROM events").string(0, 0)
                    try c.execute("COMMIT")
                    return count
                }
            }
            try await waitForLockOnTheLog(db)
            let run = try await runTracker(["retention", "--keep-days", "7"], db)
            #expect(try await reader.value == "5", "the reader saw the log as it was")
            #expect(run.status == 0, "\(run.output)")
            #expect(try await partitionExists(db, daysAgo: 10) == false, "\(run.output)")
        }
    }

    @Test func aServerWithRetentionDaysDropsOldPartitionsByItself() async throws {
        try await withTestDatabase { db in
            try await logOldImpressions(db, daysAgo: 10, count: 5)
            try await projectAll(db, expected: 5)
            // A process: what retention did is read from the process's log lines.
            try await withTracker(db, environment: ["TRACKER_RETENTION_DAYS": "7"]) { tracker in
                let dropped = try await eventually(within: .seconds(10)) { () -> Bool? in
                    try await partitionExists(db, daysAgo: 10) ? nil : true
                }
                let log = (try? String(contentsOf: tracker.output, encoding: .utf8)) ?? ""
                #expect(dropped == true, "the server ran retention at start; its log:\n\(log)")
            }
            #expect(try await partitionExists(db, daysAgo: 7), "the kept days stay")
            #expect(try await reportRows(db).reduce(0) { $0 + ($1["impressions"] as? Int ?? 0) } == 5)
        }
    }

    @Test func keepingLessThanOneDayIsRefused() async throws {
        try await withTestDatabase { db in
            let run = try await runTracker(["retention", "--keep-days", "0"], db)
            #expect(run.status != 0)
            #expect(run.output.contains("at least 1"))
        }
    }
}

/// Waits (at most 10 s) until another session holds a lock on the log's parent table.
func waitForLockOnTheLog(_ db: TestDatabase) async throws {
    let held = try await eventually(within: .seconds(10)) { () -> Bool? in
        try await db.scalar("""
            SELECT count(*) FROM pg_locks WHERE relation = 'events'::regclass AND granted
              AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            """) == "0" ? nil : true
    }
    try #require(held == true, "the reader never locked the log")
}

/// Logs `count` impressions (each its own ad) received `daysAgo` UTC days ago at noon, the
/// way the writer stores them, creating the partitions back to 12 days ago.
func logOldImpressions(_ db: TestDatabase, daysAgo: Int, count: Int) async throws {
    _ = try await db.rows("""
        SELECT tracker_ensure_event_partitions((now() AT TIME ZONE 'UTC')::date - 12, (now() AT TIME ZONE 'UTC')::date)
        """)
    _ = try await db.rows("""
        WITH ids AS (INSERT INTO event_ids SELECT gen_random_uuid() FROM generate_series(1, $2::int) RETURNING id),
        at AS (SELECT (((now() AT TIME ZONE 'UTC')::date - $1::int)::timestamp + interval '12 hours') AT TIME ZONE 'UTC' AS t)
        INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                            occurred_at, received_at, corrected_at, key_name)
        SELECT id, 'impression', 'old-' || id, '/1234/home/native', '10063170', 'app', false, false, false, t, t, t, 'app'
        FROM ids, at
        """, [String(daysAgo), String(count)])
}

/// Runs `tracker project --once` until the projections hold `expected` events (at most 20 s):
/// a transaction open anywhere in the cluster (another test) holds back what the projector may read.
func projectAll(_ db: TestDatabase, expected: Int) async throws {
    let projected = try await eventually(within: .seconds(20)) { () -> Int? in
        #expect(try await runTracker(["project", "--once"], db).status == 0)
        let n = Int(try await db.scalar("SELECT events_projected FROM projection_state") ?? "") ?? 0
        return n >= expected ? n : nil
    }
    try #require(projected == expected, "the projector read \(projected ?? 0) of \(expected) events")
}

func partition(_ db: TestDatabase, daysAgo: Int) async throws -> String {
    try #require(try await db.scalar("SELECT 'events_' || to_char((now() AT TIME ZONE 'UTC')::date - $1::int, 'YYYYMMDD')", [String(daysAgo)]))
}

func partitionExists(_ db: TestDatabase, daysAgo: Int) async throws -> Bool {
    try await db.scalar("SELECT to_regclass($1) IS NOT NULL", [try await partition(db, daysAgo: daysAgo)]) == "t"
}

/// The summary report's rows over the last two weeks, as the command line prints them in JSON.
func reportRows(_ db: TestDatabase) async throws -> [[String: AnyHashable]] {
    let today = String(Wire.isoNow().prefix(10)), start = String(Wire.isoNow(offsetSeconds: -14 * 86_400).prefix(10))
    let run = try await runTracker(["report", "summary", "--from", start, "--to", today, "--output", "json"], db)
    try #require(run.status == 0, "\(run.output)")
    let json = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
    return (json?["rows"] as? [[String: Any]] ?? []).map { $0.compactMapValues { $0 as? AnyHashable } }
}

/// Runs the tracker binary with a command against `db` (see `runTrackerCommand`).
func runTracker(_ arguments: [String], _ db: TestDatabase) async throws -> (status: Int32, stdout: String, output: String) {
    try await runTrackerCommand(arguments, environment: ["DATABASE_URL": db.url])
}

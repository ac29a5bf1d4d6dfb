import Foundation
import Testing
import Tracker

/// The least-privilege roles of sql/008_roles.sql: what each may not do, what still works under
/// them, and what `tracker serve` says when it connects as something stronger.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct DatabaseRoleTests {
    /// The SQLSTATE a statement run as `role` fails with, or `nil` when it succeeded. Each runs in
    /// a transaction that is rolled back, so nothing it did stays.
    static func refusal(_ db: TestDatabase, as role: String, _ statements: [String]) async throws -> String? {
        let url = ConnectionString.replacingLogin(of: db.url, user: role, password: "trusted")
        let pool = ConnectionPool(conninfo: url, maxConnections: 1, logger: TestEnvironment.logger)
        defer { pool.close() }
        return try await pool.withConnection { connection in
            try connection.execute("BEGIN")
            defer { connection.rollbackIfInTransaction() }
            do {
                for statement in statements { try connection.execute(statement) }
                return nil
            } catch let error as DatabaseError {
                return error.sqlState ?? "no SQLSTATE: \(error)"
            }
        }
    }

    /// A log with one event in it and its id (written as the owner), to try changing.
    static func seed(_ db: TestDatabase) async throws -> String {
        let id = UUID().uuidString.lowercased()
        try await db.pool.withConnection { c in
            try c.query("INSERT INTO event_ids VALUES ($1::uuid)", [id])
            try c.query("""
                INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                                    occurred_at, received_at, corrected_at, key_name)
                VALUES ($1::uuid, 'impression', 'req-1', '/1/a', 'f', 'app', false, false, false, now(), now(), now(), 'k')
                """, [id])
        }
        return id
    }

    static var today: String {
        let f = DateFormatter()
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd"
        return f.string(from: Date())
    }

    @Test func noRoleCanChangeTheLogOrItsIdsWhateverItSets() async throws {
        try await withTestDatabase { db in
            let id = try await Self.seed(db)
            let partition = "events_" + Self.today
            let attempts: [(String, [String])] = [
                ("update the log", ["UPDATE events SET ad_unit = '/x' WHERE id = '\(id)'"]),
                ("delete from the log", ["DELETE FROM events WHERE id = '\(id)'"]),
                ("truncate the log", ["TRUNCATE events"]),
                ("delete an id, as retention would", ["SET LOCAL tracker.retention = '\(partition)'", "DELETE FROM event_ids WHERE id = '\(id)'"]),
                ("detach a partition", ["ALTER TABLE events DETACH PARTITION \(partition)"]),
                ("drop a partition", ["DROP TABLE \(partition)"]),
                ("disable the log's triggers", ["ALTER TABLE events DISABLE TRIGGER events_append_only"]),
                ("turn triggers off for the session", ["SET session_replication_role = replica"]),
                ("retire today's partition", ["SELECT * FROM tracker_retire_partition('\(partition)', 1, false)"]),
                ("make partitions for other years", ["SELECT tracker_ensure_event_partitions('2001-01-01', '2001-12-31')"]),
                ("replace a function the owner runs", ["CREATE OR REPLACE FUNCTION tracker_reject_log_change() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN OLD; END'"]),
            ]
            for role in DatabaseRole.allCases {
                for (what, statements) in attempts {
                    let refused = try await Self.refusal(db, as: role.rawValue, statements)
                    // The projector may call retention, whose own check refuses a day still kept.
                    let expected = role == .projector && what.hasPrefix("retire") ? "22023" : "42501"
                    #expect(refused == expected, "\(role.rawValue) could \(what) (\(refused ?? "it succeeded"))")
                }
            }
            #expect(try await db.scalar("SELECT count(*) FROM events WHERE ad_unit = '/1/a'") == "1")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids WHERE id = $1", [id]) == "1")
        }
    }

    @Test func eachRoleIsRefusedWhatItsWorkDoesNotNeed() async throws {
        try await withTestDatabase { db in
            _ = try await db.createKey("app", scope: .ingest)
            let projection = "INSERT INTO format_day (traffic_class, day, ad_unit, format_id) VALUES (0, current_date, '/1/a', 'f')"
            let refusedOf: [(DatabaseRole, String, String)] = [
                (.ingest, "write the projections", projection),
                (.ingest, "read the log", "SELECT ad_unit FROM events"),
                (.ingest, "create keys", "INSERT INTO api_keys (name, scope, key_hash, key_prefix) VALUES ('x', 'ingest', '\\x00', 'x')"),
                (.ingest, "read the projections", "SELECT * FROM format_day"),
                (.ingest, "choose an event's place in the log", """
                    INSERT INTO events (tx, seq, id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                                        occurred_at, received_at, corrected_at, key_name)
                    VALUES ('1', 1, gen_random_uuid(), 'impression', 'r', '/1/a', 'f', 'app', false, false, false, now(), now(), now(), 'k')
                    """),
                (.projector, "append to the log", "INSERT INTO event_ids VALUES (gen_random_uuid())"),
                (.projector, "read keys' hashes", "SELECT key_hash FROM api_keys"),
                (.report, "read keys' hashes", "SELECT key_hash FROM api_keys"),
                (.report, "read keys at all", "SELECT name FROM api_keys"),
                (.report, "write the projections", projection),
                (.report, "append to the log", "INSERT INTO event_ids VALUES (gen_random_uuid())"),
                (.report, "read refused beacons", "SELECT * FROM beacon_rejections"),
                (.ingest, "write an append's mark but through tracker_mark_append",
                 "INSERT INTO log_marks (backend, tx) VALUES (1, '1')"),
                (.projector, "mark an append", "SELECT tracker_mark_append()"),
                (.report, "mark an append", "SELECT tracker_mark_append()"),
            ]
            for (role, what, statement) in refusedOf {
                let refused = try await Self.refusal(db, as: role.rawValue, [statement])
                #expect(refused == "42501", "\(role.rawValue) could \(what) (\(refused ?? "it succeeded"))")
            }
            // And what each needs, it may do.
            let allowed: [(DatabaseRole, String)] = [
                (.ingest, "SELECT key_hash, name, scope FROM api_keys WHERE revoked_at IS NULL"),
                (.ingest, "INSERT INTO event_ids VALUES (gen_random_uuid())"),
                (.ingest, "SELECT tracker_mark_append()"),
                (.projector, projection),
                (.projector, "SELECT count(*) FROM events"),
                (.report, "SELECT count(*) FROM format_day"),
            ]
            for (role, statement) in allowed {
                let refused = try await Self.refusal(db, as: role.rawValue, [statement])
                #expect(refused == nil, "\(role.rawValue) was refused \(statement): \(refused ?? "")")
            }
        }
    }

    /// The old guard let any role holding DELETE remove ids after `SET LOCAL tracker.retention`
    /// (a replayed event would then count again); now only the owner, inside retention, may.
    @Test func aRoleGrantedDeleteStillCannotRemoveIdsBySettingTheRetentionFlag() async throws {
        try await withTestDatabase { db in
            let id = try await Self.seed(db)
            let role = "careless_" + db.name
            try await db.pool.withConnection { c in
                try c.execute("CREATE ROLE \(role) LOGIN")
                try c.execute("GRANT SELECT, DELETE ON event_ids TO \(role)")
            }
            let refused = try await Self.refusal(db, as: role, [
                "SET LOCAL tracker.retention = 'events_\(Self.today)'", "DELETE FROM event_ids WHERE id = '\(id)'",
            ])
            #expect(refused == "42501", "a non-owner removed an id with the retention flag set (\(refused ?? "it succeeded"))")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids WHERE id = $1", [id]) == "1")
            try await db.pool.withConnection { c in
                try c.execute("REVOKE ALL ON event_ids FROM \(role)")
                try c.execute("DROP ROLE \(role)")
            }
        }
    }

    /// The documented hardening used to break ingestion once the pre-created partitions ran out
    /// (`must be owner of table events`). Here the server runs as the least-privilege roles and
    /// every partition is gone, as on the day after the last pre-created one: the writer makes
    /// today's through the owner's function and the events are stored and reported.
    @Test func ingestionAsTheIngestRoleOutlivesThePrecreatedPartitions() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                // A first batch is answered once the log's writers run, which is after the log's
                // own partitions were made at start: the drop below cannot race them.
                let warmUp = try await tracker.postEvents(Wire.batch([Wire.event(requestId: "warm-up", adUnit: "/1234/warm-up")]), key: ingest)
                try #require(warmUp.status == 200, "\(warmUp.text)")
                try await db.pool.withConnection { c in
                    try c.execute("""
                        DO $$ DECLARE p text; BEGIN
                            FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                                     WHERE i.inhparent = 'events'::regclass LOOP
                                EXECUTE format('DROP TABLE %I', p);
                            END LOOP;
                        END $$
                        """)
                }
                #expect(try await db.scalar("SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass") == "0")
                let r = try await tracker.postEvents(Wire.batch([Wire.event(requestId: "ad-a"), Wire.event(requestId: "ad-b")]), key: ingest)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.json["accepted"] as? Int == 2)
                let owner = try await db.scalar("""
                    SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.relname = 'events_\(Self.today)'
                    """)
                #expect(owner == "postgres", "the partition belongs to the owner of the log, not to tracker_ingest")
                let day = String(Wire.isoNow().prefix(10))
                var impressions: Int?
                for _ in 0..<50 {
                    let summary = try await tracker.request("GET", "/v1/reports/summary?from=\(day)&to=\(day)&adUnit=/1234/home/native",
                                                             headers: ["Authorization": "Bearer \(report)"])
                    impressions = ((summary.json["rows"] as? [[String: Any]])?.first?["impressions"] as? Int)
                    if impressions == 2 { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(impressions == 2, "the projector (tracker_projector) and the report (tracker_report) saw both")
                let ready = try await tracker.request("GET", "/readyz")
                #expect(ready.status == 200)
                #expect(ready.json["warnings"] == nil, "the roles are exactly as strong as their work: \(ready.text)")
            }
        }
    }

    @Test func servingAsASuperuserIsWarnedOfAtStartAndInReadyz() async throws {
        try await withTestDatabase { db in
            // A process: the warning is a line the process writes at start.
            let tracker = try await TrackerProcess(databaseURL: db.url, leastPrivilege: false)
            var warnings: [String] = []
            for _ in 0..<50 {
                let ready = try await tracker.request("GET", "/readyz")
                warnings = ready.json["warnings"] as? [String] ?? []
                if !warnings.isEmpty { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(warnings.count == 1, "one warning for the one connection: \(warnings)")
            #expect(warnings.first?.contains("DATABASE_URL connects as postgres, a superuser") == true)
            #expect(warnings.first?.contains("tracker_ingest") == true)
            let log = (try? String(contentsOf: tracker.output, encoding: .utf8)) ?? ""
            #expect(log.contains("\"level\":\"warning\"") && log.contains("a superuser"), "the start log says so too:\n\(log)")
            await tracker.kill9()
        }
    }

    /// The projector runs elsewhere (`tracker project`) and DATABASE_URL is tracker_ingest alone,
    /// which may not read the log: the node ingests, so it stays ready, without the lag and
    /// with a warning naming what to add (it used to answer 503 for ever).
    @Test func anIngestOnlyNodeIsReadyAndSaysWhatItCannotRead() async throws {
        try await withTestDatabase { db in
            let ingestURL = ConnectionString.replacingLogin(of: db.url, user: DatabaseRole.ingest.rawValue, password: "trusted")
            // A process: serve's start-up with ingest-only logins, as an operator runs it.
            let tracker = try await TrackerProcess(databaseURL: db.url, environment: [
                "DATABASE_URL": ingestURL, "TRACKER_PROJECTOR": "off",
            ], leastPrivilege: false)
            var ready = try await tracker.request("GET", "/readyz")
            for _ in 0..<50 where (ready.json["warnings"] as? [String]) == nil {
                try await Task.sleep(for: .milliseconds(100))
                ready = try await tracker.request("GET", "/readyz")
            }
            #expect(ready.status == 200, "\(ready.text)")
            #expect(ready.json["projectionLag"] == nil, "\(ready.text)")
            let warnings = ready.json["warnings"] as? [String] ?? []
            #expect(warnings.contains { $0.contains("may not read the log") }, "\(warnings)")
            let key = try await db.createKey("app", scope: .ingest)
            #expect(try await tracker.postEvents(Wire.batch([Wire.event()]), key: key).status == 200)
            await tracker.kill9()
        }
    }

    @Test func retentionRunsAsTheProjectorRole() async throws {
        try await withTestDatabase { db in
            // An old, wholly projected day (written as the owner; the checkpoint is moved past it).
            try await db.pool.withConnection { c in
                try c.execute("SELECT tracker_ensure_event_partitions('2026-01-01', '2026-01-01')")
                try c.execute("""
                    WITH ids AS (INSERT INTO event_ids SELECT gen_random_uuid() FROM generate_series(1, 3) RETURNING id)
                    INSERT INTO events (id, type, request_id, ad_unit, format_id, source, eea, reservation, test,
                                        occurred_at, received_at, corrected_at, key_name)
                    SELECT id, 'impression', 'r', '/1/a', 'f', 'app', false, false, false,
                           '2026-01-01 12:00Z', '2026-01-01 12:00Z', '2026-01-01 12:00Z', 'k' FROM ids
                    """)
                try c.execute("UPDATE projection_state SET checkpoint_tx = pg_current_xact_id(), checkpoint_seq = 9223372036854775807")
            }
            let url = ConnectionString.replacingLogin(of: db.url, user: DatabaseRole.projector.rawValue, password: "trusted")
            let pool = ConnectionPool(conninfo: url, maxConnections: 1, logger: TestEnvironment.logger)
            defer { pool.close() }
            let decisions = try await Retention(pool: pool, logger: TestEnvironment.logger).run(keepDays: 30, dryRun: false)
            let old = decisions.first { $0.partition == "events_20260101" }
            #expect(old?.action == .dropped(idsForgotten: 3), "\(decisions)")
            #expect(try await db.scalar("SELECT count(*) FROM event_ids") == "0")
            #expect(try await db.scalar("SELECT to_regclass('events_20260101') IS NULL") == "t")
        }
    }
}

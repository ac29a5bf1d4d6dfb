import Foundation
import Testing
@testable import Tracker

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct RetentionNameTests {
    /// Retention refuses, with an error and without trapping the server, a name that is not a
    /// daily partition of the log; before, a `precondition` crashed the whole process.
    @Test func retentionRefusesATableThatIsNotADailyPartitionWithAnError() async throws {
        try await withTestDatabase { db in
            for name in ["events", "events_2026011", "events_20260101; DROP TABLE events", "event_ids"] {
                let refused = await Self.retireError(name, db)
                #expect(refused as? RetentionError == .notADailyPartition(name))
            }
            let tables = try await db.scalar("SELECT count(*) FROM pg_class WHERE relname IN ('events', 'event_ids')")
            #expect(tables == "2")
        }
    }

    static func retireError(_ name: String, _ db: TestDatabase) async -> (any Error)? {
        do {
            _ = try await db.pool.withConnection { c in
                try c.transaction { try Retention.retire(name, day: "2026-01-01", keepDays: 1, dryRun: false, on: c) }
            }
            return nil
        } catch { return error }
    }
}

import Foundation
import Testing
import Tracker
import TrackerPostgres

/// How a report tells a projector that runs, however starved between its steps, from none at
/// all: the shared lock a running projector holds for its life.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct ProjectorPresenceTests {
    /// With events waiting and the checkpoint still, a report waits its whole
    /// `TRACKER_REPORT_WAIT` while a projector holds the lock, and stops after the 1 s stall
    /// limit once none does.
    @Test func aReportWaitsForAProjectorThatRunsAndNotForNone() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("analyst", scope: .report)
            try await withInProcessTracker(db, environment: ["TRACKER_PROJECTOR": "off", "TRACKER_REPORT_WAIT": "10"]) { tracker in
                try await db.append([Events.make(.impression, ad: "waiting", at: Events.at(9))])
                func timedReport() async throws -> (Duration, HTTPClient.Response) {
                    let start = ContinuousClock.now
                    let r = try await tracker.request("GET", "/v1/reports/summary?from=\(Events.day0)&to=\(Events.day0)",
                                                      headers: ["Authorization": "Bearer \(key)"])
                    return (ContinuousClock.now - start, r)
                }
                let presence = PresenceLock(conninfo: db.url, name: "tracker.projector.running", applicationName: "test projector")
                #expect(await presence.hold())
                let (waited, held) = try await timedReport()
                #expect(waited >= .seconds(10), "a running projector is waited for: \(waited)")
                #expect(held.headers["x-projection-lag-events"] == "1")
                presence.release()
                let (stopped, none) = try await timedReport()
                // Bounds far from both 1 s and 10 s: a loaded machine slows every request.
                #expect(stopped >= .seconds(1) && stopped < .seconds(8), "no projector: the stall limit ends the wait: \(stopped)")
                #expect(none.headers["x-projection-lag-events"] == "1")
            }
        }
    }

    /// The projector of `tracker serve` holds the lock while it runs and lets it go when it stops.
    @Test func aServingProjectorHoldsTheLockWhileItRuns() async throws {
        try await withTestDatabase { db in
            let holders = """
                SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'tracker projector'
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """
            // The holders' count once it is `wanted`, or the last one read after 10 s.
            @Sendable func holdersOnce(_ wanted: String) async throws -> String {
                var count = ""
                for _ in 0..<200 {
                    count = try await db.scalar(holders) ?? ""
                    if count == wanted { break }
                    try await Task.sleep(for: .milliseconds(50))
                }
                return count
            }
            try await withInProcessTracker(db) { _ in
                let held = try await holdersOnce("1")
                #expect(held == "1", "the projector holds the lock while it runs")
            }
            let left = try await holdersOnce("0")
            #expect(left == "0", "the lock goes with the projector")
        }
    }
}

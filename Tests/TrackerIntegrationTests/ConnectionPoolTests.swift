import Foundation
import ServiceLifecycle
import Testing
import Tracker

/// The pool's waits end when the borrower's task is cancelled, and as a service it closes when
/// its service group shuts down.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct ConnectionPoolTests {
    @Test func aCancelledBorrowerStopsWaitingForAConnection() async throws {
        let pool = ConnectionPool(conninfo: TestEnvironment.adminURL!, maxConnections: 1, acquireTimeout: .seconds(60),
                                  logger: TestEnvironment.logger)
        defer { pool.close() }
        // The one connection is busy for 3 s.
        let holder = Task { try await pool.withConnection { try $0.query("SELECT pg_sleep(3)") ; return true } }
        try await Task.sleep(for: .milliseconds(300))
        let started = ContinuousClock.now
        let waiter = Task { try await pool.withConnection { _ in true } }
        try await Task.sleep(for: .milliseconds(200))
        #expect(pool.usage.waiting == 1, "the second borrower waits")
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(ContinuousClock.now - started < .seconds(2), "it stopped waiting when cancelled, not after the busy connection or the 60 s timeout")
        #expect(pool.usage.waiting == 0)
        #expect(try await holder.value)
    }

    @Test func asAServiceThePoolClosesWhenItsGroupShutsDown() async throws {
        let pool = ConnectionPool(conninfo: TestEnvironment.adminURL!, maxConnections: 1, logger: TestEnvironment.logger)
        #expect(try await pool.withConnection { try $0.query("SELECT 1").string(0, 0) } == "1")
        let group = ServiceGroup(configuration: .init(services: [pool], logger: TestEnvironment.logger))
        let running = Task { try await group.run() }
        try await Task.sleep(for: .milliseconds(200))
        #expect(try await pool.withConnection { _ in true }, "open while the group runs")
        await group.triggerGracefulShutdown()
        try await running.value
        await #expect(throws: DatabaseError.self) { try await pool.withConnection { _ in true } }
    }
}

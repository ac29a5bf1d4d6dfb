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
        // The one connection stays busy until the test releases it. What is asserted is an
        // order, not a duration: the cancelled waiter ends while the connection is still busy (a
        // pool that ignored the cancellation would hand it the connection once released, and
        // the waiter would return instead of throwing). Elapsed time would measure how busy the
        // test process's threads are when the whole suite runs.
        let release = DispatchSemaphore(value: 0)
        let holder = Task { try await pool.withConnection { _ in release.wait(); return true } }
        for _ in 0..<1200 where pool.usage.inUse == 0 { try await Task.sleep(for: .milliseconds(50)) }
        let waiter = Task { try await pool.withConnection { _ in true } }
        for _ in 0..<1200 where pool.usage.waiting == 0 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(pool.usage.waiting == 1, "the second borrower waits")
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(pool.usage.inUse == 1, "it stopped waiting when cancelled, while the connection was still busy")
        #expect(pool.usage.waiting == 0)
        release.signal()
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

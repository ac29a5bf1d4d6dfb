import Foundation
import Synchronization
import ServiceLifecycle
import Testing
import Tracker

/// The pool's waits end when the borrower's task is cancelled, every connection it lends runs
/// at once, and as a service it closes when its service group shuts down.
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

    /// Borrowers blocked in PostgreSQL on a lock hold their threads; the borrower holding the
    /// lock must still run, or it could never release it. A pool with fewer threads than
    /// connections fails here: the holder never sees the others wait.
    @Test func borrowersBlockedOnALockLeaveTheHolderRunning() async throws {
        let connections = 4
        let pool = ConnectionPool(conninfo: TestEnvironment.adminURL!, maxConnections: connections, acquireTimeout: .seconds(60),
                                  logger: TestEnvironment.logger)
        defer { pool.close() }
        let key = Int32.random(in: 1...Int32.max)
        let locked = LockTaken()
        let sawWaiters = try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                try await pool.withConnection { c in
                    try c.execute("SELECT pg_advisory_lock(7, \(key))")
                    locked.flag.store(true, ordering: .releasing)
                    defer { _ = try? c.execute("SELECT pg_advisory_unlock(7, \(key))") }
                    // Until every other borrower waits on the lock (90 s at most: in the full
                    // suite on two cores the borrowers' tasks can wait seconds to be scheduled).
                    for _ in 0..<1800 {
                        let waiting = try c.query("""
                            SELECT count(*) FROM pg_locks
                            WHERE locktype = 'advisory' AND classid = 7 AND objid = \(key) AND NOT granted
                            """).int64(0, 0)
                        if waiting == Int64(connections - 1) { return true }
                        usleep(50_000)
                    }
                    return false
                }
            }
            for _ in 1..<connections {
                group.addTask {
                    while !locked.flag.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(10)) }
                    return try await pool.withConnection { c in
                        try c.execute("SELECT pg_advisory_lock(7, \(key))")
                        try c.execute("SELECT pg_advisory_unlock(7, \(key))")
                        return true
                    }
                }
            }
            return try await group.reduce(true) { $0 && $1 }
        }
        #expect(sawWaiters, "the holder saw the other \(connections - 1) borrowers wait on its lock, and each took it after")
    }
}

/// Set once the holder has its lock; the other borrowers ask for it only after.
private final class LockTaken: Sendable {
    let flag = Atomic<Bool>(false)
}

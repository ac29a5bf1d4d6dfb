import Foundation
import Synchronization
import Testing
import Tracker

/// Deliveries of the same events that overlap in time (issue 12).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ConcurrentDeliveryTests {
    /// A client's retry racing its first attempt through two nodes: the same ids in opposite
    /// orders, written at once by two logs. Both must be stored (or found stored) without a
    /// deadlock; before the ids' locks were taken in one order, PostgreSQL aborted one of the
    /// two writes with 40P01 (a 503 for the client) in a few rounds out of forty.
    @Test func sameIdsWrittenConcurrentlyInOppositeOrdersNeverDeadlock() async throws {
        try await withTestDatabase { db in
            // No append deadline: this is about deadlocks, and on a machine the whole suite loads a
            // round can take longer than the 8 s default (its writes then commit after a 503).
            var configuration = EventLog.Configuration()
            configuration.appendTimeout = nil
            let first = EventLog(pool: ConnectionPool(conninfo: db.url, maxConnections: 2, logger: TestEnvironment.logger),
                                 configuration: configuration, logger: TestEnvironment.logger)
            let second = EventLog(pool: ConnectionPool(conninfo: db.url, maxConnections: 2, logger: TestEnvironment.logger),
                                  configuration: configuration, logger: TestEnvironment.logger)
            var failures: [AppendError] = []
            var stored = 0
            try await withThrowingTaskGroup(of: Void.self) { services in
                services.addTask { try await first.run() }
                services.addTask { try await second.run() }
                for round in 0..<40 {
                    let events = (0..<400).map { _ in Events.make(.impression, ad: "ad-\(round)", at: Events.at(10)) }
                    await withTaskGroup(of: Result<AppendOutcome, AppendError>.self) { pair in
                        pair.addTask { await Self.attempt(first, events) }
                        pair.addTask { await Self.attempt(second, events.reversed()) }
                        for await result in pair {
                            switch result {
                            case .success(let outcome): stored += outcome.stored
                            case .failure(let error): failures.append(error)
                            }
                        }
                    }
                }
                first.stop()
                second.stop()
                try await services.waitForAll()
            }
            #expect(failures.isEmpty, "\(failures.count) of 80 concurrent writes failed: \(failures)")
            #expect(stored == 40 * 400, "each id stored by exactly one of the two writes")
            #expect(try await db.scalar("SELECT count(*) FROM events") == String(40 * 400))
        }
    }

    /// A task group that runs the log beside work that throws cancels the log's task: `run()`
    /// must then stop, after answering what it took, or the group waits for it for ever (the
    /// whole test run once hung so, at 0 % CPU).
    @Test func cancellingTheTaskThatRunsTheLogEndsIt() async throws {
        try await withTestDatabase { db in
            let log = EventLog(pool: ConnectionPool(conninfo: db.url, maxConnections: 2, logger: TestEnvironment.logger), logger: TestEnvironment.logger)
            final class Flag: Sendable { let raised = Atomic<Bool>(false) }
            let ended = Flag()
            let running = Task { try? await log.run(); ended.raised.store(true, ordering: .sequentiallyConsistent) }
            let events = (0..<100).map { _ in Events.make(.impression, ad: "ad-cancelled", at: Events.at(10)) }
            #expect(try await log.append(events, keyName: "tests").stored == 100)
            running.cancel()
            let deadline = ContinuousClock.now + .seconds(30)
            while !ended.raised.load(ordering: .sequentiallyConsistent), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            let stopped = ended.raised.load(ordering: .sequentiallyConsistent)
            #expect(stopped, "run() still running 30 s after its task was cancelled")
            log.stop()  // lets the test end even when the check above failed
            _ = await running.value
            await #expect(throws: AppendError.shuttingDown) { try await log.append(events, keyName: "tests") }
        }
    }

    static func attempt(_ log: EventLog, _ events: [TrackingEvent]) async -> Result<AppendOutcome, AppendError> {
        do { return .success(try await log.append(events, keyName: "tests")) } catch {
            return .failure(error)
        }
    }
}

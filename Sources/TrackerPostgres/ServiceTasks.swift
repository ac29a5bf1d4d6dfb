/// Work a service hands to its own `run()`: each item runs there as a child task, so nothing a
/// service starts outlives it, and a test that runs the service runs its timers too.
///
/// A service's state machine decides and asks for what must happen later or elsewhere ("wake
/// me at T", "load the table"); the service's shell adds that here, and `run()` (called from
/// the service's own `run()`) turns each item into a child of its task group. Items added
/// before `run()` begins wait for it; items added once it has ended never run, so a machine
/// whose callers wait on such work knows whether its service still runs.
package final class ServiceTasks: Sendable {
    private let items: AsyncStream<@Sendable () async -> Void>
    private let continuation: AsyncStream<@Sendable () async -> Void>.Continuation

    package init() {
        (items, continuation) = AsyncStream.makeStream()
    }

    /// Runs `work` as a child of `run()`'s task group.
    package func add(_ work: @escaping @Sendable () async -> Void) {
        continuation.yield(work)
    }

    /// Calls `fired` once `clock` reaches `deadline`, unless `run()` ends first.
    ///
    /// A timer is a child task asleep on the clock: a test drives it with a clock it advances.
    /// Timers are not cancelled one by one: a machine keeps at most one set and re-arms it when
    /// it fires (a timer whose reason went away fires, finds nothing due and asks for the next
    /// one), which costs less than cancelling and re-adding one as waits come and go.
    package func schedule<C: Clock>(at deadline: C.Instant, on clock: C, _ fired: @escaping @Sendable () -> Void) {
        add {
            do { try await clock.sleep(until: deadline, tolerance: nil) } catch { return }
            fired()
        }
    }

    /// Runs what is added until `finish()` or the cancellation of the calling task; then
    /// cancels what still runs (timers end at once) and returns once every child has ended.
    package func run() async {
        await withDiscardingTaskGroup { group in
            for await work in items {
                group.addTask(operation: work)
            }
            group.cancelAll()
        }
    }

    /// Ends `run()`: the items added so far start, and every child is cancelled.
    package func finish() {
        continuation.finish()
    }
}

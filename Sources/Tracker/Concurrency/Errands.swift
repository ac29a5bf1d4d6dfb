import ServiceLifecycle
import Synchronization

/// Work a request starts and waits for only so long (`firstWithin`), run as children of this
/// service's `run()`: an errand its caller stopped waiting for goes on there, and ends with the
/// service at the latest, not in a task of its own.
///
/// Who waits until when is `ErrandsStateMachine`'s, decided under one lock; this shell runs
/// each errand and the one deadline timer the machine asks for in `run()`. List it after the
/// services its errands use (the log, the pools) and before the HTTP server, so that it stops
/// after the last request and before what its errands need.
package final class Errands<C: Clock>: Service, Sendable where C.Duration == Duration {
    /// How a waiting caller is woken.
    private enum Wake {
        case ended, late, runInPlace
    }

    private typealias Machine = ErrandsStateMachine<C, CheckedContinuation<Wake, Never>>
    private let state: Mutex<Machine>
    private let clock: C
    private let tasks = ServiceTasks()

    package init(clock: C) {
        state = Mutex(Machine(clock: clock))
        self.clock = clock
    }

    /// The value of `operation` if it ends within `limit`, else `nil` while it goes on (an
    /// event log append cannot be taken back once queued, nor needs to be). Once the service
    /// has stopped, `operation` runs in the caller's task, without a limit.
    package func firstWithin<T: Sendable>(_ limit: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
        let value = ErrandValue<T>()
        let wake = await withCheckedContinuation { (waiter: CheckedContinuation<Wake, Never>) in
            // The errand is handed to `run()` under the lock, so that `run()` cannot end between
            // the machine's yes and the errand's arrival (the errand would be lost).
            let timer: C.Instant? = state.withLock { machine in
                switch machine.start(waiter, within: limit) {
                case .runInPlace:
                    waiter.resume(returning: .runInPlace)
                    return nil
                case .run(let id, let timer):
                    tasks.add { [weak self] in
                        value.set(await operation())
                        self?.state.withLock { $0.ended(id) }?.resume(returning: .ended)
                    }
                    return timer
                }
            }
            if let timer { schedule(timer) }
        }
        switch wake {
        case .ended: return value.get()
        case .late: return nil
        case .runInPlace: return await operation()
        }
    }

    /// Runs errands and their deadlines until the service group shuts down (or the task is
    /// cancelled, which cancels the errands under way: those that heed it end sooner).
    package func run() async throws {
        await withGracefulShutdownHandler {
            await tasks.run()
        } onGracefulShutdown: { [tasks] in
            tasks.finish()
        }
        for waiter in state.withLock({ $0.stop() }) { waiter.resume(returning: .runInPlace) }
    }

    private func schedule(_ instant: C.Instant) {
        tasks.schedule(at: instant, on: clock) { [weak self] in self?.timerFired(instant) }
    }

    private func timerFired(_ instant: C.Instant) {
        let (expired, next) = state.withLock { $0.timerFired(instant) }
        if let next { schedule(next) }
        for waiter in expired { waiter.resume(returning: .late) }
    }
}

extension Errands where C == ContinuousClock {
    package convenience init() {
        self.init(clock: ContinuousClock())
    }
}

/// An errand's value, set by the errand before its caller is woken to read it.
private final class ErrandValue<T: Sendable>: Sendable {
    private let value = Mutex<T?>(nil)

    func set(_ newValue: T) { value.withLock { $0 = newValue } }
    func get() -> T? { value.withLock { $0 } }
}

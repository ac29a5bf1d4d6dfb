import Synchronization

/// The table of active keys in memory, as `KeyCacheStateMachine` keeps it: the machine decides
/// under one lock, and this shell runs each load of the table and each timer as a child of
/// `run()`, so no load outlives the cache and a test drives its time with a clock of its own.
final class KeyCache<C: Clock>: Sendable where C.Duration == Duration {
    typealias Keys = [KeyDigest: Principal]
    private typealias Machine = KeyCacheStateMachine<C, CheckedContinuation<Keys, any Error>>

    private let state: Mutex<Machine>
    private let clock: C
    private let readTable: @Sendable () async throws -> Keys
    private let tasks = ServiceTasks()

    /// `readTable` reads every active key (a query, in `APIKeys`).
    init(cacheTTL: Duration, minReloadInterval: Duration, clock: C, readTable: @escaping @Sendable () async throws -> Keys) {
        state = Mutex(Machine(cacheTTL: cacheTTL, minReloadInterval: minReloadInterval, clock: clock))
        self.clock = clock
        self.readTable = readTable
    }

    /// The principal of the key with `digest`, or `nil` for a key that is not active; waits
    /// for a load when the table in memory cannot tell. Throws what the load threw, or
    /// `CancellationError` once `run()` has ended.
    func principal(_ digest: KeyDigest) async throws -> Principal? {
        let since: C.Instant
        switch state.withLock({ $0.lookup(digest) }) {
        case .answer(let principal, let next):
            perform(next)
            return principal
        case .mustWait(let instant):
            since = instant
        }
        let keys = try await withCheckedThrowingContinuation { continuation in
            switch state.withLock({ $0.wait(continuation, since: since) }) {
            case .ready(let keys): continuation.resume(returning: keys)
            case .waiting(let next): perform(next)
            case .stopped: continuation.resume(throwing: CancellationError())
            }
        }
        return keys[digest]
    }

    /// The principal if the table in memory answers without waiting, else `nil`.
    func cachedPrincipal(_ digest: KeyDigest) -> Principal? {
        guard let (principal, next) = state.withLock({ $0.answerWithoutWaiting(digest) }) else { return nil }
        perform(next)
        return principal
    }

    /// A key was revoked through this cache's process.
    func revoked() {
        state.withLock { $0.revoked() }
    }

    /// Loads the table at once, then runs the loads and timers the machine asks for until
    /// `finish()` or the cancellation of the calling task; callers still waiting then fail.
    func run() async {
        perform(state.withLock { $0.started() })
        await tasks.run()
        for waiter in state.withLock({ $0.stop() }) { waiter.resume(throwing: CancellationError()) }
    }

    /// Ends `run()`.
    func finish() {
        tasks.finish()
    }

    private func perform(_ next: Machine.Next) {
        switch next {
        case .none: break
        case .load(let began): tasks.add { [weak self] in await self?.load(began: began) }
        case .scheduleTimer(let instant): tasks.schedule(at: instant, on: clock) { [weak self] in self?.timerFired() }
        }
    }

    private func load(began: C.Instant) async {
        let outcome: Result<Keys, any Error>
        do { outcome = .success(try await readTable()) } catch { outcome = .failure(error) }
        let (answered, next) = state.withLock { $0.loaded(outcome, began: began) }
        perform(next)
        for waiter in answered { waiter.resume(with: outcome) }
    }

    private func timerFired() {
        perform(state.withLock { $0.timerFired() })
    }
}

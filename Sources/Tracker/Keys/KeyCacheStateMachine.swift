/// What the key cache knows (the table of active keys in memory, the load under way, who waits
/// for one) and every decision it makes, without any I/O.
///
/// `KeyCache` feeds it events under one lock and carries out what each returns: start a load
/// of the table, set the timer, resume waiting callers. Nothing here sleeps, queries or resumes
/// a continuation, and time is read from the clock it is given, so the TTL, the shared reloads
/// and their spacing are tested with a clock the test advances (`KeyCacheStateMachineTests`).
///
/// The rules:
/// - A key in a table younger than `cacheTTL` is answered from it. Up to twice `cacheTTL` it
///   is still answered, and a load begins (a revoked key stops within the TTL plus one load,
///   and the answers given meanwhile do not wait).
/// - A key the table does not hold (a new one, or a guess), or any key once the table is older
///   than twice `cacheTTL`, waits for a load that began after it asked. Such callers share
///   loads: one at a time, and at most one beginning per `minReloadInterval`, so a flood of
///   guessed keys costs a few queries a second.
/// - A load that began before the table in memory was stamped (a revocation stamps an empty
///   table) does not replace it.
///
/// Generic over the clock and what wakes a waiting caller (`Waiter`, a continuation in the shell).
struct KeyCacheStateMachine<C: Clock, Waiter> where C.Duration == Duration {
    typealias Keys = [KeyDigest: Principal]

    let cacheTTL: Duration
    let minReloadInterval: Duration
    let clock: C

    /// The keys in memory and when the load that read them began (`loaded` false: stamped by a
    /// revocation, holding nothing).
    private var table: (keys: Keys, loadedAt: C.Instant, loaded: Bool)?
    /// When the load under way began; `nil` when none is.
    private var loading: C.Instant?
    private var lastLoadBegan: C.Instant?
    /// A table past its TTL answered a key: a load should begin (nobody waits for it).
    private var refreshWanted = false
    /// Callers waiting for a load that begins at or after the instant they asked.
    private var waiters: [(since: C.Instant, waiter: Waiter)] = []
    /// When the timer set for the shell fires; `nil` when none is set.
    private var timer: C.Instant?
    private(set) var isStopped = false

    init(cacheTTL: Duration, minReloadInterval: Duration, clock: C) {
        self.cacheTTL = cacheTTL
        self.minReloadInterval = minReloadInterval
        self.clock = clock
    }

    /// What the shell does next: begin a load (stamped with that instant), set the timer, or nothing.
    enum Next: Equatable {
        case load(began: C.Instant)
        case scheduleTimer(C.Instant)
        case none
    }

    enum Lookup {
        /// The key's principal, from the table in memory; the shell then does `then`.
        case answer(Principal, then: Next)
        /// The table cannot tell: `wait`, for a load that began at or after `since`.
        case mustWait(since: C.Instant)
    }

    /// The cache starts: the table is loaded at once, so that it answers without waiting
    /// (`answerWithoutWaiting`) from the first requests on.
    mutating func started() -> Next {
        refreshWanted = true
        return next(clock.now)
    }

    /// A caller presents the key whose digest is `digest`.
    mutating func lookup(_ digest: KeyDigest) -> Lookup {
        let now = clock.now
        if let table, let principal = table.keys[digest] {
            let age = table.loadedAt.duration(to: now)
            if age < cacheTTL { return .answer(principal, then: .none) }
            if age < cacheTTL * 2 {
                refreshWanted = true
                return .answer(principal, then: next(now))
            }
        }
        return .mustWait(since: now)
    }

    /// The key's principal if the table in memory answers it without waiting (it holds the key
    /// and is younger than twice the TTL), as `lookup` would; `nil` when only a wait can tell.
    mutating func answerWithoutWaiting(_ digest: KeyDigest) -> (principal: Principal, then: Next)? {
        if case .answer(let principal, let next) = lookup(digest) { return (principal, next) }
        return nil
    }

    enum WaitAction {
        /// A load that began at or after `since` has ended meanwhile: its table answers.
        case ready(Keys)
        /// The caller waits; the shell does `then`.
        case waiting(then: Next)
        /// The cache no longer runs: nobody would load the table.
        case stopped
    }

    /// A caller told to wait (at `since`) waits with `waiter`.
    mutating func wait(_ waiter: Waiter, since: C.Instant) -> WaitAction {
        if isStopped { return .stopped }
        if let table, table.loaded, table.loadedAt >= since { return .ready(table.keys) }
        waiters.append((since, waiter))
        return .waiting(then: next(clock.now))
    }

    /// The load that began at `began` ended: the callers it answers (those who asked at or
    /// before `began`) with its outcome, and what the shell does next.
    mutating func loaded(_ outcome: Result<Keys, any Error>, began: C.Instant) -> (answered: [Waiter], then: Next) {
        loading = nil
        // Answered or not, a refresh is no longer wanted: a later answer past the TTL asks
        // again, rather than a failing load being retried while nobody asks.
        refreshWanted = false
        if case .success(let keys) = outcome, table.map({ $0.loadedAt < began }) ?? true {
            table = (keys, began, true)
        }
        // Callers ask (`lookup`) and then wait, so `since` is not quite in order: look at each.
        var answered: [Waiter] = []
        waiters.removeAll { entry in
            guard entry.since <= began else { return false }
            answered.append(entry.waiter)
            return true
        }
        return (answered, next(clock.now))
    }

    /// The timer fired: what the shell does next (a load the spacing held back may begin).
    mutating func timerFired() -> Next {
        timer = nil
        return next(clock.now)
    }

    /// A key was revoked here: an empty table stamped now, so that a load that began before
    /// cannot bring the key back.
    mutating func revoked() {
        table = ([:], clock.now, false)
    }

    /// The cache stops (its service ended): the waiting callers, to fail. Later callers that
    /// would wait fail at once.
    mutating func stop() -> [Waiter] {
        isStopped = true
        defer { waiters = [] }
        return waiters.map(\.waiter)
    }

    /// Begins a load if one is wanted and may begin now, else sets the timer for when it may.
    private mutating func next(_ now: C.Instant) -> Next {
        guard !isStopped, loading == nil, refreshWanted || !waiters.isEmpty else { return .none }
        if let lastLoadBegan {
            let allowed = lastLoadBegan.advanced(by: minReloadInterval)
            if now < allowed {
                guard timer == nil else { return .none }
                timer = allowed
                return .scheduleTimer(allowed)
            }
        }
        loading = now
        lastLoadBegan = now
        refreshWanted = false
        return .load(began: now)
    }
}

/// Who waits for an errand and until when, and every decision about it, without any I/O.
///
/// `Errands` feeds it events under one lock: an errand starts (its caller waits at most a
/// limit), an errand ends, the timer fires, the service stops. Each caller is answered once,
/// by whichever comes first, its errand's end or its deadline: an answer is given only by
/// taking the caller out of `waiting`. Time is read from the clock it is given, so deadlines
/// are tested with a clock the test advances (`ErrandsStateMachineTests`).
///
/// Limits differ between callers (a click's wait, a probe's), so deadlines are kept in order
/// and one timer is set for the earliest; a timer that fires with nothing due sets the next.
struct ErrandsStateMachine<C: Clock, Waiter> where C.Duration == Duration {
    typealias ErrandID = Int

    let clock: C
    private var waiting: [ErrandID: Waiter] = [:]
    /// The waiting callers' deadlines, earliest first; those answered by their errand are
    /// dropped when the timer reaches them, or all at once when nobody waits.
    private var deadlines: [(at: C.Instant, id: ErrandID)] = []
    private var nextID: ErrandID = 0
    /// When the timer set for the shell fires; `nil` when none is set.
    private var timer: C.Instant?
    private(set) var isStopped = false

    init(clock: C) {
        self.clock = clock
    }

    /// Callers waiting for their errand.
    var waitingCount: Int { waiting.count }

    enum StartAction {
        /// Run errand `id`; with `scheduleTimer`, set the timer for that instant.
        case run(ErrandID, scheduleTimer: C.Instant?)
        /// The service no longer runs errands: the caller runs it itself, without a deadline.
        case runInPlace
    }

    /// A caller starts an errand and waits with `waiter` at most `limit` for it.
    mutating func start(_ waiter: Waiter, within limit: Duration) -> StartAction {
        if isStopped { return .runInPlace }
        let id = nextID
        nextID += 1
        let deadline = clock.now.advanced(by: limit)
        waiting[id] = waiter
        // Most callers of one limit arrive in deadline order: the place is at or near the end.
        var i = deadlines.endIndex
        while i > deadlines.startIndex, deadlines[i - 1].at > deadline { i -= 1 }
        deadlines.insert((deadline, id), at: i)
        if let timer, timer <= deadline { return .run(id, scheduleTimer: nil) }
        timer = deadline
        return .run(id, scheduleTimer: deadline)
    }

    /// Errand `id` ended: its waiting caller, to answer with its value, unless the deadline
    /// answered it already.
    mutating func ended(_ id: ErrandID) -> Waiter? {
        defer { if waiting.isEmpty { deadlines.removeAll(keepingCapacity: true) } }
        return waiting.removeValue(forKey: id)
    }

    /// The timer set for `instant` fired: the callers whose deadline passed, to answer without
    /// a value, and the instant to set the timer for next (`nil`: none needed). A timer that an
    /// earlier one replaced fires too; it answers what is due and leaves the set one alone.
    mutating func timerFired(_ instant: C.Instant) -> (expired: [Waiter], scheduleTimer: C.Instant?) {
        let now = clock.now
        var expired: [Waiter] = []
        let due = deadlines.prefix { $0.at <= now }.count
        for (_, id) in deadlines.prefix(due) {
            if let waiter = waiting.removeValue(forKey: id) { expired.append(waiter) }
        }
        deadlines.removeFirst(due)
        if timer == instant { timer = nil }
        // The earliest deadline still waited for; answered ones before it go now.
        let answered = deadlines.prefix { waiting[$0.id] == nil }.count
        deadlines.removeFirst(answered)
        guard timer == nil, let next = deadlines.first?.at else { return (expired, nil) }
        timer = next
        return (expired, next)
    }

    /// The service stopped running errands (its `run()` ended, every errand it ran has
    /// ended): the callers still waiting, whose errands came too late to run there, to tell to
    /// run them in place. Later callers run theirs in place at once.
    mutating func stop() -> [Waiter] {
        isStopped = true
        defer { waiting = [:]; deadlines = [] }
        return Array(waiting.values)
    }
}

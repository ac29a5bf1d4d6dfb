/// One append a writer took from the log's queue: what it writes, and the id it answers by.
struct TakenAppend<Request> {
    let id: Int
    let request: Request
}

extension TakenAppend: Sendable where Request: Sendable {}

/// What the event log knows about waiting appends and its writers, and every decision it makes
/// (accept or refuse, which writer writes what and when, which append's deadline passed, who
/// still needs an answer), without any I/O.
///
/// `EventLog` feeds it events under one lock and carries out what each returns: it resumes a
/// writer with a group, writes the group, resumes a request with its outcome, sets the timer.
/// Nothing here sleeps or resumes a continuation, and time is read from the clock it is given,
/// so group commit, back-pressure, deadlines and the drain at shutdown are tested in
/// microseconds with a clock the test advances (`EventLogStateMachineTests`).
///
/// Deadlines need one timer: every append gets the same `appendTimeout`, so the earliest
/// deadline is the oldest unanswered append's. The machine asks for a timer when an append
/// arrives and none is set, and when it fires for the next one, at the oldest append still
/// unanswered; under load that is one timer per `appendTimeout`, not one per append.
///
/// Every append is answered exactly once: an answer is given only by taking the append out of
/// `pending` (`claim`, `timerFired`), so a write that ends after the deadline answered finds
/// nothing to answer.
///
/// Generic over the clock, what a request carries (`Request`: its events and the continuation
/// of its caller, in the log) and what wakes a parked writer (`Writer`).
struct EventLogStateMachine<C: Clock, Request, Writer> where C.Duration == Duration {
    typealias AppendID = Int

    typealias Taken = TakenAppend<Request>

    private struct Pending {
        var request: Request
        var events: Int
        /// A writer has it (it is no longer queued).
        var taken = false
    }

    /// The log's limits: group size, parallel-write threshold, queue bound, append timeout.
    let limits: EventLog.Configuration
    let clock: C
    /// Appends not answered yet, queued or being written.
    private var pending: [AppendID: Pending] = [:]
    /// Appends in arrival order with their deadlines (the timeout is the same for all, so this
    /// is deadline order too). Writers take from `nextToTake`, deadlines are checked from
    /// `nextToExpire` (the oldest that may be unanswered); entries before both cursors are
    /// dropped now and then.
    private var arrivals: [(id: AppendID, deadline: C.Instant?)] = []
    private var nextToTake = 0
    private var nextToExpire = 0
    private var nextID: AppendID = 0
    /// Events of queued appends (accepted, no writer has them yet).
    private(set) var queuedEvents = 0
    /// Writers between taking a group and finishing its write.
    private var writing = 0
    private var idleWriters: [Writer] = []
    /// When the timer set for the shell fires; `nil` when none is set.
    private var timer: C.Instant?
    private(set) var isStopping = false

    init(_ limits: EventLog.Configuration, clock: C) {
        self.limits = limits
        self.clock = clock
    }

    enum SubmitAction {
        /// Queued as `id`; when `start` is set, resume that parked writer with that group; with
        /// `scheduleTimer`, set the log's timer for that instant.
        case accepted(AppendID, start: (writer: Writer, group: [Taken])?, scheduleTimer: C.Instant?)
        case refused(AppendError)
    }

    /// A request of `events` events (at least one) arrives.
    mutating func submit(_ request: Request, events: Int) -> SubmitAction {
        if isStopping { return .refused(.shuttingDown) }
        if queuedEvents + events > limits.maxQueuedEvents { return .refused(.overloaded) }
        let id = nextID
        nextID += 1
        pending[id] = Pending(request: request, events: events)
        let deadline = limits.appendTimeout.map { clock.now.advanced(by: $0) }
        arrivals.append((id, deadline))
        queuedEvents += events
        let timer = deadline.flatMap { setTimer($0) }
        if mayStartWrite, let writer = idleWriters.popLast() {
            return .accepted(id, start: (writer, takeGroup()), scheduleTimer: timer)
        }
        return .accepted(id, start: nil, scheduleTimer: timer)
    }

    enum WriterAction {
        case write([Taken])
        /// Stopping and nothing is left: the writer ends.
        case finish
        /// Nothing to do yet: the machine keeps the writer until `submit` or `stop` wakes it.
        case park
    }

    /// A writer is free: at start, or with `afterWrite` once its group's write ended.
    mutating func writerReady(_ writer: Writer, afterWrite: Bool) -> WriterAction {
        if afterWrite { writing -= 1 }
        if queuedEvents == 0, isStopping { return .finish }
        if mayStartWrite { return .write(takeGroup()) }
        idleWriters.append(writer)
        return .park
    }

    /// Stop taking appends; the parked writers to wake, each with a group of what is queued
    /// (everything accepted is still written) or `nil` to end.
    mutating func stop() -> [(writer: Writer, group: [Taken]?)] {
        isStopping = true
        defer { idleWriters = [] }
        return idleWriters.map { writer in (writer, queuedEvents > 0 ? takeGroup() : nil) }
    }

    /// Takes append `id`'s request to answer it; `nil` when it was answered already.
    mutating func claim(_ id: AppendID) -> Request? {
        pending.removeValue(forKey: id)?.request
    }

    /// Whether every one of `ids` has had its answer (a write of them need not go on).
    func allAnswered(_ ids: some Sequence<AppendID>) -> Bool {
        ids.allSatisfy { pending[$0] == nil }
    }

    /// The timer fired: the requests whose deadline passed, to answer `databaseUnavailable`,
    /// and the instant to set the timer for next (`nil`: every append has its answer).
    /// Those still queued are withdrawn, so nothing of them is stored; those a writer has get
    /// their answer early (their write is one transaction, and a retry of it counts duplicates).
    mutating func timerFired() -> (expired: [Request], scheduleTimer: C.Instant?) {
        timer = nil
        let now = clock.now
        var expired: [Request] = []
        while nextToExpire < arrivals.count {
            let (id, deadline) = arrivals[nextToExpire]
            if let entry = pending[id] {
                guard let deadline, deadline <= now else { break }
                pending[id] = nil
                if !entry.taken { queuedEvents -= entry.events }
                expired.append(entry.request)
            }
            nextToExpire += 1
        }
        // Everything before `nextToExpire` is answered: writers need not walk it, and it can be
        // dropped even while every writer is stuck in a write that does not end.
        nextToTake = max(nextToTake, nextToExpire)
        compactArrivals()
        // The loop stopped at the oldest unanswered append, if any: its deadline is the next.
        let next = nextToExpire < arrivals.count ? arrivals[nextToExpire].deadline : nil
        return (expired, next.flatMap { setTimer($0) })
    }

    /// Arrivals kept for the cursors (for tests: what the machine's memory grows with).
    var keptArrivals: Int { arrivals.count }

    /// An idle writer should take the queue now. A second writer starts only when
    /// `parallelWriteThreshold` events wait: fewer wait for the write in flight, so small
    /// requests share one commit instead of splitting into small parallel ones.
    private var mayStartWrite: Bool {
        queuedEvents > 0 && (writing == 0 || isStopping || queuedEvents >= limits.parallelWriteThreshold)
    }

    /// Takes the oldest queued appends, up to `maxGroupEvents` (at least one append).
    private mutating func takeGroup() -> [Taken] {
        var group: [Taken] = []
        var events = 0
        while nextToTake < arrivals.count {
            let id = arrivals[nextToTake].id
            if let entry = pending[id], !entry.taken {
                if !group.isEmpty, events + entry.events > limits.maxGroupEvents { break }
                pending[id]!.taken = true
                events += entry.events
                group.append(Taken(id: id, request: entry.request))
            }
            nextToTake += 1
        }
        queuedEvents -= events
        writing += 1
        compactArrivals()
        return group
    }

    /// Sets the timer for `deadline` unless one is set (it fires no later: deadlines come in
    /// order); the instant the shell must schedule, if any.
    private mutating func setTimer(_ deadline: C.Instant) -> C.Instant? {
        guard timer == nil else { return nil }
        timer = deadline
        return deadline
    }

    /// Drops the arrivals both cursors have passed, once they are many and at least half.
    /// Answered arrivals are passed first: the timer fires once per `appendTimeout`, and the
    /// arrivals of that long must not all be kept until it does.
    private mutating func compactArrivals() {
        if limits.appendTimeout != nil {
            while nextToExpire < nextToTake, pending[arrivals[nextToExpire].id] == nil { nextToExpire += 1 }
        }
        let passed = limits.appendTimeout == nil ? nextToTake : min(nextToTake, nextToExpire)
        guard passed >= 1024, passed * 2 >= arrivals.count else { return }
        arrivals.removeFirst(passed)
        nextToTake -= passed
        nextToExpire = max(nextToExpire - passed, 0)
    }
}

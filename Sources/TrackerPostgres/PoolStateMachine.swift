/// What a `ConnectionPool` knows, and every decision it makes, without any I/O.
///
/// The pool's shell feeds it events (a borrower arrives, a connection comes back, a wait is
/// cancelled, the timer fires, the pool closes) under one lock and carries out the action each
/// returns: resume a borrower, open a connection, close one, set the timer. Nothing here sleeps
/// or resumes a continuation, and time is read from the clock it is given, so every path is
/// tested in microseconds with a clock the test advances (`PoolStateMachineTests`).
///
/// Deadlines need one timer: every waiter gets the same `acquireTimeout`, so the earliest
/// deadline is the first waiter's. The machine asks for a timer when a waiter queues and none
/// is set, and for the next one when it fires while others still wait; a timer whose waiter was
/// served meanwhile fires, fails nobody and sets the next.
///
/// Generic over the clock (deadlines), the place a connection lives in (`Slot`) and whatever
/// the shell wakes a borrower with (`Waiter`, a continuation in the shell).
struct PoolStateMachine<C: Clock, Slot, Waiter> where C.Duration == Duration {
    /// The identity of one borrow, handed out before it may wait so cancellation can name it.
    typealias BorrowID = Int

    let maxConnections: Int
    let acquireTimeout: Duration
    let clock: C

    private var idle: [Slot] = []
    private var slotCount = 0
    /// Borrowers waiting for a connection, in arrival (and so deadline) order.
    private var waiters: [(id: BorrowID, deadline: C.Instant, waiter: Waiter)] = []
    private var nextID: BorrowID = 0
    /// When the timer set for the shell fires; `nil` when none is set.
    private var timer: C.Instant?
    private(set) var isClosed = false

    init(maxConnections: Int, acquireTimeout: Duration, clock: C) {
        precondition(maxConnections > 0)
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        self.clock = clock
    }

    /// Connections lent out, connections idle, borrowers waiting.
    var usage: (inUse: Int, idle: Int, waiting: Int) { (slotCount - idle.count, idle.count, waiters.count) }

    mutating func makeBorrowID() -> BorrowID {
        defer { nextID += 1 }
        return nextID
    }

    enum BorrowAction {
        /// Give the borrower this idle slot.
        case lend(Slot)
        /// Give the borrower a new slot: the pool has room for one more connection.
        case open
        /// Fail the borrower: the pool is closed.
        case failClosed
        /// Every connection is lent out: the borrower must `wait`.
        case mustWait
    }

    /// A borrower arrives; it is served at once if it can be (no waiter is involved, so the
    /// common case costs the shell no continuation).
    mutating func borrow() -> BorrowAction {
        if isClosed { return .failClosed }
        if let slot = idle.popLast() { return .lend(slot) }
        if slotCount < maxConnections {
            slotCount += 1
            return .open
        }
        return .mustWait
    }

    enum WaitAction {
        /// A slot came free since `borrow`: give it to the borrower.
        case lend(Slot)
        case open
        /// The borrower waits until its deadline (or a release, or its cancellation); with
        /// `scheduleTimer`, the shell sets the pool's timer for that instant.
        case queued(scheduleTimer: C.Instant?)
        case failClosed
        /// Fail the borrower: its task was cancelled before it could wait.
        case failCancelled
    }

    /// Borrow `id`, told to wait, waits with `waiter`; `isCancelled` is its task's state.
    mutating func wait(_ id: BorrowID, waiter: Waiter, isCancelled: Bool) -> WaitAction {
        switch borrow() {
        case .lend(let slot): return .lend(slot)
        case .open: return .open
        case .failClosed: return .failClosed
        case .mustWait: break
        }
        if isCancelled { return .failCancelled }
        let deadline = clock.now.advanced(by: acquireTimeout)
        waiters.append((id, deadline, waiter))
        return .queued(scheduleTimer: setTimer(deadline))
    }

    enum ReleaseAction {
        /// Hand the slot straight to this waiting borrower.
        case handOver(Slot, to: Waiter)
        /// The slot went back to the idle list.
        case keep
        /// The pool is closed: close the slot's connection.
        case close(Slot)
    }

    /// A borrower gives its slot back.
    mutating func release(_ slot: Slot) -> ReleaseAction {
        if isClosed { return .close(slot) }
        if !waiters.isEmpty { return .handOver(slot, to: waiters.removeFirst().waiter) }
        idle.append(slot)
        return .keep
    }

    /// Borrow `id`'s task was cancelled: the waiter to fail, unless it is not waiting (served,
    /// timed out, or not arrived yet, in which case `wait` sees the cancellation itself).
    mutating func cancel(_ id: BorrowID) -> Waiter? {
        guard let i = waiters.firstIndex(where: { $0.id == id }) else { return nil }
        return waiters.remove(at: i).waiter
    }

    /// The timer fired: the waiters whose deadline passed, to fail with `poolExhausted`, and
    /// the instant to set the timer for next (`nil`: nobody waits).
    mutating func timerFired() -> (expired: [Waiter], scheduleTimer: C.Instant?) {
        timer = nil
        let now = clock.now
        let count = waiters.prefix { $0.deadline <= now }.count
        let expired = waiters.prefix(count).map(\.waiter)
        waiters.removeFirst(count)
        return (expired, waiters.first.flatMap { setTimer($0.deadline) })
    }

    /// The pool closes: the idle slots to close and the waiters to fail. Slots lent out are
    /// closed as they come back (`release`).
    mutating func close() -> (idle: [Slot], waiters: [Waiter]) {
        isClosed = true
        defer { idle = []; waiters = [] }
        return (idle, waiters.map(\.waiter))
    }

    /// Sets the timer for `deadline` unless one is set (it fires no later: deadlines come in
    /// order); the instant the shell must schedule, if any.
    private mutating func setTimer(_ deadline: C.Instant) -> C.Instant? {
        guard timer == nil else { return nil }
        timer = deadline
        return deadline
    }
}

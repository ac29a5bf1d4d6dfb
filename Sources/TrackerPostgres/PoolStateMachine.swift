/// What a `ConnectionPool` knows, and every decision it makes, without any I/O.
///
/// The pool's shell feeds it events (a borrower arrives, a connection comes back, a wait is
/// cancelled, time passes, the pool closes) under one lock and carries out the action each
/// returns: resume a borrower, open a connection, close one. Nothing here sleeps, resumes a
/// continuation or reads a clock, so every path is tested in microseconds with instants made up
/// by the test (`PoolStateMachineTests`).
///
/// Generic over the clock's `Instant` (deadlines), the place a connection lives in (`Slot`) and
/// whatever the shell wakes a borrower with (`Waiter`, a continuation in the shell).
struct PoolStateMachine<Instant: InstantProtocol, Slot, Waiter> where Instant.Duration == Duration {
    /// The identity of one borrow, handed out before it may wait so cancellation can name it.
    typealias BorrowID = Int

    let maxConnections: Int
    let acquireTimeout: Duration

    private var idle: [Slot] = []
    private var slotCount = 0
    /// Borrowers waiting for a connection, in arrival (and so deadline) order.
    private var waiters: [(id: BorrowID, deadline: Instant, waiter: Waiter)] = []
    private var nextID: BorrowID = 0
    private(set) var isClosed = false

    init(maxConnections: Int, acquireTimeout: Duration) {
        precondition(maxConnections > 0)
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
    }

    /// Connections lent out, connections idle, borrowers waiting.
    var usage: (inUse: Int, idle: Int, waiting: Int) { (slotCount - idle.count, idle.count, waiters.count) }

    /// When the earliest waiting borrower gives up; `nil` when none waits.
    var nextDeadline: Instant? { waiters.first?.deadline }

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
        /// The borrower waits until `deadline` (or a release, or its cancellation).
        case queued(deadline: Instant)
        case failClosed
        /// Fail the borrower: its task was cancelled before it could wait.
        case failCancelled
    }

    /// Borrow `id`, told to wait at `now`, waits with `waiter`; `isCancelled` is its task's state.
    mutating func wait(_ id: BorrowID, waiter: Waiter, isCancelled: Bool, now: Instant) -> WaitAction {
        switch borrow() {
        case .lend(let slot): return .lend(slot)
        case .open: return .open
        case .failClosed: return .failClosed
        case .mustWait: break
        }
        if isCancelled { return .failCancelled }
        let deadline = now.advanced(by: acquireTimeout)
        waiters.append((id, deadline, waiter))
        return .queued(deadline: deadline)
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

    /// Time has reached `now`: the waiters whose deadline passed, to fail with `poolExhausted`.
    mutating func expire(now: Instant) -> [Waiter] {
        let expired = waiters.prefix { $0.deadline <= now }.count
        defer { waiters.removeFirst(expired) }
        return waiters.prefix(expired).map(\.waiter)
    }

    /// The pool closes: the idle slots to close and the waiters to fail. Slots lent out are
    /// closed as they come back (`release`).
    mutating func close() -> (idle: [Slot], waiters: [Waiter]) {
        isClosed = true
        defer { idle = []; waiters = [] }
        return (idle, waiters.map(\.waiter))
    }
}

import Logging
import NIOPosix
import ServiceLifecycle
import Synchronization

/// A bounded pool of PostgreSQL connections that lends one only inside a closure.
///
/// A borrower waits at most `acquireTimeout` for a connection, and no longer than its task
/// runs: cancelling the task ends the wait. As a `Service` the pool keeps those deadlines
/// (its timer runs in `run()`) and closes itself when the service group shuts down; list it
/// before the services that use it, so they stop first. A pool that is not run (a command's,
/// a test's) lends the same, and a borrower waits until a connection comes free or its task
/// is cancelled.
///
/// Every decision (lend, open, queue, hand over, expire, close) is `PoolStateMachine`'s,
/// taken under one lock; this class carries them out: it resumes borrowers, sets the timer
/// the machine asks for as a child of `run()` and runs the libpq work.
///
/// libpq calls block, so the closure runs on the pool's own `NIOThreadPool`, never on Swift's
/// cooperative threads. The pool has a thread for each of its connections, started with the
/// pool (idle threads cost only their stacks' address space): every borrower
/// holding one runs at once, so a statement waiting on a lock never waits for a thread that
/// the statement holding the lock would need to finish. A connection that broke is dropped
/// and the next borrower of its slot reconnects, so the pool heals itself after PostgreSQL
/// restarts.
public final class ConnectionPool: Service, Sendable {
    public let conninfo: String
    public let maxConnections: Int
    public let acquireTimeout: Duration
    /// Statements run on every new connection before it is lent (session settings such as
    /// `SET statement_timeout`): set here rather than in the conninfo's `options`, which a
    /// `DATABASE_URL` carrying its own `options` would replace.
    public let sessionSetup: String?
    private let logger: Logger
    private typealias Machine = PoolStateMachine<ContinuousClock, Slot, CheckedContinuation<Slot, any Error>>
    private let state: Mutex<Machine>
    /// The deadlines' timer, run by `run()`.
    private let timers = ServiceTasks()
    /// Where the libpq calls run: a thread per connection, stopped when the pool goes away.
    private let threads: NIOThreadPool

    public init(conninfo: String, maxConnections: Int = 8, acquireTimeout: Duration = .seconds(5),
                sessionSetup: String? = nil, logger: Logger) {
        self.conninfo = conninfo
        self.sessionSetup = sessionSetup
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        self.logger = logger
        state = Mutex(Machine(maxConnections: maxConnections, acquireTimeout: acquireTimeout, clock: ContinuousClock()))
        threads = NIOThreadPool(numberOfThreads: maxConnections)
        threads.start()
    }

    deinit {
        // Nothing can borrow any more (a waiting borrower holds the pool), so only idle
        // connections are left to close; a close still queued as the threads stop runs on the
        // queue the shutdown hands it back on.
        close()
        threads.shutdownGracefully { _ in }
    }

    /// Connections lent out, connections idle in the pool, and borrowers waiting for one (for the pool gauges).
    public var usage: (inUse: Int, idle: Int, waiting: Int) {
        state.withLock { $0.usage }
    }

    /// Runs `body` with a connection of its own; the connection goes back to the pool afterwards.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let slot = try await acquire()
        defer { release(slot) }
        return try await slot.run(on: threads, conninfo: conninfo, sessionSetup: sessionSetup, logger: logger, body)
    }

    /// Keeps the borrowers' deadlines until the service group shuts down gracefully, then
    /// closes the pool. A cancelled group leaves it open: services that drain on cancellation
    /// (the event log) still need it.
    public func run() async throws {
        await withGracefulShutdownHandler {
            await timers.run()
        } onGracefulShutdown: {
            self.close()
        }
    }

    /// Closes idle connections and fails every waiter; later borrowers get `poolClosed`, and
    /// `run()` returns.
    public func close() {
        timers.finish()
        let (idle, waiters) = state.withLock { $0.close() }
        for slot in idle { slot.close(on: threads) }
        for w in waiters { w.resume(throwing: Self.closed) }
    }

    fileprivate static var closed: DatabaseError { DatabaseError(.poolClosed, serverMessage: "pool closed") }

    private func acquire() async throws -> Slot {
        switch state.withLock({ $0.borrow() }) {
        case .lend(let slot): return slot
        case .open: return Slot()
        case .failClosed: throw Self.closed
        case .mustWait: break
        }
        let id = state.withLock { $0.makeBorrowID() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let action = state.withLock {
                    $0.wait(id, waiter: continuation, isCancelled: Task.isCancelled)
                }
                switch action {
                case .lend(let slot): continuation.resume(returning: slot)
                case .open: continuation.resume(returning: Slot())
                case .failClosed: continuation.resume(throwing: Self.closed)
                case .failCancelled: continuation.resume(throwing: CancellationError())
                case .queued(let timer):
                    if let timer { schedule(timer) }
                }
            }
        } onCancel: {
            state.withLock { $0.cancel(id) }?.resume(throwing: CancellationError())
        }
    }

    private func schedule(_ timer: ContinuousClock.Instant) {
        // Weakly: a pool that is never run keeps the timer queued, and must still go away.
        timers.schedule(at: timer, on: ContinuousClock()) { [weak self] in self?.timerFired() }
    }

    /// Fails the borrowers whose `acquireTimeout` has passed.
    private func timerFired() {
        let (expired, next) = state.withLock { $0.timerFired() }
        if let next { schedule(next) }
        for waiter in expired {
            waiter.resume(throwing: DatabaseError(.poolExhausted, serverMessage: "no database connection became free within \(acquireTimeout)"))
        }
    }

    private func release(_ slot: Slot) {
        switch state.withLock({ $0.release(slot) }) {
        case .handOver(let slot, let waiter): waiter.resume(returning: slot)
        case .keep: break
        case .close(let slot): slot.close(on: threads)
        }
    }
}

/// One place in the pool: once opened, the connection it holds.
///
/// `@unchecked Sendable` is sound because a slot is lent to one borrower at a time and its
/// work items run one after the other: a borrower's `run` has resumed its caller, its last
/// use of `connection`, before the pool can lend or close the slot again.
private final class Slot: @unchecked Sendable {
    private var connection: Connection?

    func run<T: Sendable>(on threads: NIOThreadPool, conninfo: String, sessionSetup: String?, logger: Logger,
                          _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        // `submit`, not `runIfActive`: a borrower whose task is cancelled still runs what it
        // was lent the connection for (the event log drains its last appends that way).
        try await withCheckedThrowingContinuation { continuation in
            threads.submit { state in
                guard state == .active else { return continuation.resume(throwing: ConnectionPool.closed) }
                continuation.resume(with: Result { try self.runBlocking(conninfo: conninfo, sessionSetup: sessionSetup, logger: logger, body) })
            }
        }
    }

    private func runBlocking<T>(conninfo: String, sessionSetup: String?, logger: Logger,
                                _ body: (Connection) throws -> T) throws -> T {
        do {
            let connection: Connection
            if let existing = self.connection, existing.isHealthy {
                connection = existing
            } else {
                self.connection?.close()
                self.connection = nil
                let opened = try Connection.open(conninfo)
                if let sessionSetup {
                    do { try opened.execute(sessionSetup) } catch {
                        opened.close()
                        throw error
                    }
                }
                connection = opened
                self.connection = connection
            }
            let value = try body(connection)
            connection.rollbackIfInTransaction()
            return value
        } catch {
            self.connection?.rollbackIfInTransaction()
            if let c = self.connection, !c.isHealthy || (error as? DatabaseError)?.isReadOnlyServer == true {
                c.close()
                self.connection = nil
                logger.debug("dropped broken database connection")
            }
            throw error
        }
    }

    func close(on threads: NIOThreadPool) {
        // Runs whatever state the threads report: a close queued as they stop, or submitted
        // after, is handed back (on the shutdown's queue, or in place) and closes all the same.
        threads.submit { _ in
            self.connection?.close()
            self.connection = nil
        }
    }
}

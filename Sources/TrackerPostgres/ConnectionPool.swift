import Dispatch
import Logging
import ServiceLifecycle
import Synchronization

/// A bounded pool of PostgreSQL connections that lends one only inside a closure.
///
/// A borrower waits at most `acquireTimeout` for a connection, and no longer than its task
/// runs: cancelling the task ends the wait. As a `Service` the pool closes itself when the
/// service group shuts down; list it before the services that use it, so they stop first.
///
/// libpq calls block, so each pooled connection owns a serial `DispatchQueue` and the
/// closure runs there, never on Swift's cooperative threads. A connection that broke is
/// dropped and the next borrower of its slot reconnects, so the pool heals itself after
/// PostgreSQL restarts.
public final class ConnectionPool: Service, Sendable {
    public let conninfo: String
    public let maxConnections: Int
    public let acquireTimeout: Duration
    /// Statements run on every new connection before it is lent (session settings such as
    /// `SET statement_timeout`): set here rather than in the conninfo's `options`, which a
    /// `DATABASE_URL` carrying its own `options` would replace.
    public let sessionSetup: String?
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var idle: [Slot] = []
        var slotCount = 0
        var waiters: [(id: Int, continuation: CheckedContinuation<Slot, any Error>)] = []
        var nextWaiterID = 0
        var closed = false
    }

    public init(conninfo: String, maxConnections: Int = 8, acquireTimeout: Duration = .seconds(5),
                sessionSetup: String? = nil, logger: Logger) {
        precondition(maxConnections > 0)
        self.conninfo = conninfo
        self.sessionSetup = sessionSetup
        self.maxConnections = maxConnections
        self.acquireTimeout = acquireTimeout
        self.logger = logger
    }

    /// Connections lent out, connections idle in the pool, and borrowers waiting for one (for the pool gauges).
    public var usage: (inUse: Int, idle: Int, waiting: Int) {
        state.withLock { s in (s.slotCount - s.idle.count, s.idle.count, s.waiters.count) }
    }

    /// Runs `body` with a connection of its own; the connection goes back to the pool afterwards.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let slot = try await acquire()
        defer { release(slot) }
        return try await slot.run(conninfo: conninfo, sessionSetup: sessionSetup, logger: logger, body)
    }

    /// Runs until the service group shuts down gracefully, then closes the pool. A cancelled
    /// group leaves it open: services that drain on cancellation (the event log) still need it.
    public func run() async throws {
        do {
            try await gracefulShutdown()
            close()
        } catch {}
    }

    /// Closes idle connections and fails every waiter; later borrowers get `poolClosed`.
    public func close() {
        let (idle, waiters) = state.withLock { s -> ([Slot], [CheckedContinuation<Slot, any Error>]) in
            s.closed = true
            defer { s.idle = []; s.waiters = [] }
            return (s.idle, s.waiters.map(\.continuation))
        }
        for slot in idle { slot.close() }
        for w in waiters { w.resume(throwing: DatabaseError(.poolClosed, serverMessage: "pool closed")) }
    }

    private func acquire() async throws -> Slot {
        enum Next { case slot(Slot), wait }
        let next: Next = try state.withLock { s in
            if s.closed { throw DatabaseError(.poolClosed, serverMessage: "pool closed") }
            if let slot = s.idle.popLast() { return .slot(slot) }
            if s.slotCount < maxConnections {
                s.slotCount += 1
                return .slot(Slot())
            }
            return .wait
        }
        if case .slot(let slot) = next { return slot }

        // Wait for a release, at most `acquireTimeout`, or until the borrower's task is cancelled.
        let id = state.withLock { s in
            defer { s.nextWaiterID += 1 }
            return s.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                enum Registered { case waiting, served, closed, cancelled }
                let registered: Registered = state.withLock { s in
                    if s.closed { return .closed }
                    if Task.isCancelled { return .cancelled }
                    if let slot = s.idle.popLast() {
                        continuation.resume(returning: slot)
                        return .served
                    }
                    s.waiters.append((id, continuation))
                    return .waiting
                }
                switch registered {
                case .served: return
                case .closed: continuation.resume(throwing: DatabaseError(.poolClosed, serverMessage: "pool closed"))
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .waiting:
                    let timeout = acquireTimeout
                    DispatchQueue.global().asyncAfter(deadline: .now() + Self.interval(timeout)) { [weak self] in
                        self?.endWait(id, DatabaseError(.poolExhausted, serverMessage: "no database connection became free within \(timeout)"))
                    }
                }
            }
        } onCancel: {
            endWait(id, CancellationError())
        }
    }

    private static func interval(_ duration: Duration) -> DispatchTimeInterval {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }

    /// Ends waiter `id`'s wait with `error`, unless a release served it first.
    private func endWait(_ id: Int, _ error: any Error) {
        let waiter = state.withLock { s -> CheckedContinuation<Slot, any Error>? in
            guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.waiters.remove(at: i).continuation
        }
        waiter?.resume(throwing: error)
    }

    private func release(_ slot: Slot) {
        let waiter = state.withLock { s -> CheckedContinuation<Slot, any Error>? in
            if s.closed { return nil }
            if !s.waiters.isEmpty { return s.waiters.removeFirst().continuation }
            s.idle.append(slot)
            return nil
        }
        if let waiter {
            waiter.resume(returning: slot)
        } else if state.withLock({ $0.closed }) {
            slot.close()
        }
    }
}

/// One place in the pool: a serial queue and, once opened, the connection it guards.
///
/// `@unchecked Sendable` is sound because `connection` is read and written only by
/// blocks running on `queue`, which is serial, and a slot is lent to one borrower at a time.
private final class Slot: @unchecked Sendable {
    private let queue = DispatchQueue(label: "tracker.postgres.connection")
    private var connection: Connection?

    func run<T: Sendable>(conninfo: String, sessionSetup: String?, logger: Logger,
                          _ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
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
                    continuation.resume(returning: value)
                } catch {
                    self.connection?.rollbackIfInTransaction()
                    if let c = self.connection, !c.isHealthy || (error as? DatabaseError)?.isReadOnlyServer == true {
                        c.close()
                        self.connection = nil
                        logger.debug("dropped broken database connection")
                    }
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    func close() {
        queue.async {
            self.connection?.close()
            self.connection = nil
        }
    }
}

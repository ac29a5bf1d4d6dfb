import Logging
import Metrics
import Synchronization
import TrackerPostgres

/// The next window of a single-node log, read on a second connection while the step before
/// it folds its events and commits.
///
/// A projector that is behind otherwise alternates: the database reads while the tracker
/// waits, then the tracker folds while the database waits. Reading ahead lets the two run at
/// once, so a step takes about the longer of the two instead of their sum, and on cores shared
/// with an ingest the projector has two busy threads to be scheduled instead of one.
///
/// A window is the rows that follow a position of the log, read below the horizon of its own
/// snapshot (`ProjectorSQL.nextEvents`). Every transaction older than that horizon has ended,
/// so no row is added below it later: the window is the start of what the next step would read
/// itself, and the step reads the rest of its share after it. A step takes the window only
/// when the projections' checkpoint, read under the projector's lock, is the window's start.
/// When it is not (another projector stepped, a step rolled back), the window is dropped.
///
/// A window is started after a step that read a full share from where this projector's
/// previous read ended (or after its first step): projectors of one database that take turns
/// on its lock would otherwise each read every share twice, once for a window the other one's
/// step makes stale.
final class ReadAhead: Sendable {
    /// A place in a single-node log: a row's transaction and its sequence number in it.
    struct Position: Sendable, Equatable {
        var tx: UInt64
        var seq: Int64

        init(tx: UInt64, seq: Int64) {
            (self.tx, self.seq) = (tx, seq)
        }

        /// The place of the last of `rows` (read by `ProjectorSQL.nextEvents`; not empty).
        init(lastOf rows: QueryResult) throws {
            (tx, seq) = try LogBatch.position(rows, rows.rowCount - 1)
        }
    }

    /// Rows read after `after`, in log order, handed once to the step that takes them.
    ///
    /// `@unchecked Sendable`: `rows` is written by the read before its task ends and taken,
    /// under `lock`, by the step that awaited that task; a result is only read after.
    final class Window: @unchecked Sendable {
        let after: Position
        private var rows: QueryResult?
        private let lock = Mutex(())

        init(after: Position, rows: QueryResult) {
            self.after = after
            self.rows = rows
        }

        /// The rows, once: whoever takes them holds the only reference, so they go with the
        /// step's batch (or at once, when the step does not use them).
        fileprivate func take() -> QueryResult? {
            lock.withLock { _ in
                defer { rows = nil }
                return rows
            }
        }
    }

    /// A read started and not taken yet.
    private struct Pending {
        var task: Task<Window?, Never>
        var phase: Phase
    }

    /// Whether a read waits for a connection, reads, or was abandoned before it began (then
    /// it never begins): a step that will not wait for it, or a projector that stopped.
    private final class Phase: Sendable {
        enum Value: Int, AtomicRepresentable {
            case waiting, reading, abandoned
        }

        private let value = Atomic<Value>(.waiting)

        var isWaiting: Bool { value.load(ordering: .acquiring) == .waiting }

        /// Moves from waiting to `next`; false once it moved already.
        func leaveWaiting(for next: Value) -> Bool {
            value.compareExchange(expected: .waiting, desired: next, ordering: .acquiringAndReleasing).exchanged
        }
    }

    private struct State {
        var pending: Pending?
        /// Where this projector's last read ended.
        var lastEnd: Position?
    }

    private let pool: ConnectionPool
    private let state = Mutex(State())
    private let counters = Dictionary(uniqueKeysWithValues: ReadAheadTally.Outcome.allCases.map { outcome in
        (outcome, Counter(label: "tracker_projector_read_ahead_total", dimensions: [("outcome", outcome.rawValue)]))
    })
    private let tally = Mutex(ReadAheadTally())
    private let logger: Logger

    init(pool: ConnectionPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
    }

    /// What became of the windows so far.
    var counts: ReadAheadTally { tally.withLock { $0 } }

    private func count(_ outcome: ReadAheadTally.Outcome) {
        tally.withLock { $0.add(outcome) }
        counters[outcome]?.increment()
    }

    /// Records that a step read from `start` to `end`, and starts reading the next window when
    /// it read a `full` share from where the last read ended.
    func stepRead(from start: Position, to end: Position, full: Bool, limit: Int) {
        let followsOn = state.withLock { state in
            defer { state.lastEnd = end }
            return state.lastEnd == nil || state.lastEnd == start
        }
        guard full, followsOn else { return }
        let phase = Phase()
        let task = Task<Window?, Never> { [pool, logger] in
            // Abandoned before it began: no connection is taken for it.
            guard phase.isWaiting, !Task.isCancelled else { return nil }
            do {
                return try await pool.withConnection { connection -> Window? in
                    guard phase.leaveWaiting(for: .reading) else { return nil }
                    let rows = try connection.transaction(begin: "BEGIN READ ONLY") {
                        try connection.execute(ProjectorSQL.plannerSettings)
                        return try LogLayout.singleNode.nextEvents(after: String(end.tx), end.seq, limit: limit, on: connection)
                    }
                    return Window(after: end, rows: rows)
                }
            } catch {
                // The step reads the log itself; its own read reports what is wrong.
                if !(error is CancellationError) {
                    logger.debug("projector: reading ahead failed", metadata: ["tracker.error": "\(String(reflecting: error))"])
                }
                return nil
            }
        }
        if let replaced = swapPending(Pending(task: task, phase: phase)) { Self.abandon(replaced) }
    }

    /// Puts `new` in place of the read pending, and returns that one.
    private func swapPending(_ new: Pending?) -> Pending? {
        state.withLock { state in
            defer { state.pending = new }
            return state.pending
        }
    }

    /// The window started last, once read; `nil` when none was started, its read failed, or it
    /// still waits for a connection (the step then reads the log itself rather than wait twice).
    func take() async -> Window? {
        guard let pending = swapPending(nil) else { return nil }
        guard !pending.phase.leaveWaiting(for: .abandoned) else {
            pending.task.cancel()
            count(.abandoned)
            return nil
        }
        guard let window = await pending.task.value else {
            count(.failed)
            return nil
        }
        return window
    }

    /// Waits until the window being read, if any, is read (or its read failed), and leaves it
    /// for the next step.
    func settled() async {
        let task = state.withLock { $0.pending?.task }
        _ = await task?.value
    }

    /// The rows of `window` when it starts at `position` (the step's checkpoint) and holds
    /// some, counted as taken; otherwise they are released and counted as dropped.
    func rows(of window: Window, at position: Position?) -> QueryResult? {
        let rows = window.take()
        guard let rows, rows.rowCount > 0, window.after == position else {
            if rows != nil { count(.dropped) }
            return nil
        }
        count(.taken)
        return rows
    }

    /// Forgets the window being read (the projector stopped): a read that has not begun never
    /// begins, one that has is left to end.
    func discard() {
        if let pending = swapPending(nil) { Self.abandon(pending) }
    }

    private static func abandon(_ pending: Pending) {
        _ = pending.phase.leaveWaiting(for: .abandoned)
        pending.task.cancel()
    }
}

/// What became of the windows a projector read ahead of its steps (`Projector.readAheadTally`,
/// and the metric `tracker_projector_read_ahead_total` by `outcome`).
public struct ReadAheadTally: Sendable, Equatable {
    /// What became of one window.
    public enum Outcome: String, CaseIterable, Sendable {
        /// A step read from it: it started at the step's checkpoint and held rows.
        case taken
        /// A step did not use it: it started elsewhere than the step's checkpoint (another
        /// projector stepped, or the step before rolled back), or it held no rows.
        case dropped
        /// Its read still waited for a connection when the step began: the step read the log
        /// itself rather than wait twice.
        case abandoned
        /// Its read failed; the step read the log itself.
        case failed
    }

    /// Windows a step read from.
    public var taken = 0
    /// Windows a step did not use.
    public var dropped = 0
    /// Windows whose read had not begun when the step began.
    public var abandoned = 0
    /// Windows whose read failed.
    public var failed = 0

    /// A tally with the given counts.
    public init(taken: Int = 0, dropped: Int = 0, abandoned: Int = 0, failed: Int = 0) {
        (self.taken, self.dropped, self.abandoned, self.failed) = (taken, dropped, abandoned, failed)
    }

    mutating func add(_ outcome: Outcome) {
        switch outcome {
        case .taken: taken += 1
        case .dropped: dropped += 1
        case .abandoned: abandoned += 1
        case .failed: failed += 1
        }
    }
}

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
/// A window is started only after a step that read a full share from where this projector's
/// previous read ended: projectors of one database that take turns on its lock would
/// otherwise each read every share twice, once for a window the other one's step makes stale.
final class ReadAhead: Sendable {
    /// A place in a single-node log: a row's transaction and its sequence number in it.
    struct Position: Sendable, Equatable {
        var tx: UInt64
        var seq: Int64
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
        let value = Atomic<Int>(0)
        static let waiting = 0, reading = 1, abandoned = 2
        /// Moves from waiting to `next`; false once it moved already.
        func leaveWaiting(for next: Int) -> Bool {
            value.compareExchange(expected: Self.waiting, desired: next, ordering: .acquiringAndReleasing).exchanged
        }
    }

    private struct State {
        var pending: Pending?
        /// Where this projector's last read ended.
        var lastEnd: Position?
    }

    private let pool: ConnectionPool
    private let state = Mutex(State())
    private let taken = Counter(label: "tracker_projector_read_ahead_total", dimensions: [("outcome", "taken")])
    private let dropped = Counter(label: "tracker_projector_read_ahead_total", dimensions: [("outcome", "dropped")])
    private let tally = Mutex(ReadAheadTally())

    init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// The windows the steps took and dropped so far.
    var counts: ReadAheadTally { tally.withLock { $0 } }

    /// Records that a step read from `start` to `end`, and starts reading the next window when
    /// it read a `full` share from where the last read ended.
    func stepRead(from start: Position, to end: Position, full: Bool, limit: Int) {
        let followsOn = state.withLock { state in
            defer { state.lastEnd = end }
            return state.lastEnd == nil || state.lastEnd == start
        }
        guard full, followsOn else { return }
        let pool = self.pool
        let phase = Phase()
        let task = Task<Window?, Never> {
            try? await pool.withConnection { connection -> Window? in
                guard phase.leaveWaiting(for: Phase.reading) else { return nil }
                let rows = try connection.transaction(begin: "BEGIN READ ONLY") {
                    try connection.execute(ProjectorSQL.plannerSettings)
                    return try LogLayout.singleNode.nextEvents(after: String(end.tx), end.seq, limit: limit, on: connection)
                }
                return Window(after: end, rows: rows)
            }
        }
        let replaced = state.withLock { state in
            defer { state.pending = Pending(task: task, phase: phase) }
            return state.pending
        }
        if let replaced { Self.abandon(replaced) }
    }

    /// The window started last, once read; `nil` when none was started, its read failed, or it
    /// still waits for a connection (the step then reads the log itself rather than wait twice).
    func take() async -> Window? {
        guard let pending = state.withLock({ state in
            defer { state.pending = nil }
            return state.pending
        }) else { return nil }
        guard !pending.phase.leaveWaiting(for: Phase.abandoned) else {
            pending.task.cancel()
            return nil
        }
        return await pending.task.value
    }

    /// The rows of `window` when it starts at `position` (what the step's checkpoint is), counted
    /// as taken; otherwise they are released and counted as dropped.
    func rows(of window: Window, at position: Position?) -> QueryResult? {
        let rows = window.take()
        let matches = rows != nil && window.after == position
        tally.withLock { matches ? ($0.taken += 1) : ($0.dropped += 1) }
        (matches ? taken : dropped).increment()
        return matches ? rows : nil
    }

    /// Forgets the window being read (the projector stopped): a read that has not begun never
    /// begins, one that has is left to end.
    func discard() {
        if let pending = state.withLock({ state in
            defer { state.pending = nil }
            return state.pending
        }) {
            Self.abandon(pending)
        }
    }

    private static func abandon(_ pending: Pending) {
        _ = pending.phase.leaveWaiting(for: Phase.abandoned)
        pending.task.cancel()
    }
}

/// How many windows read ahead a projector's steps took and dropped (`Projector.readAhead`).
public struct ReadAheadTally: Sendable, Equatable {
    /// Windows a step read from: they started at its checkpoint.
    public var taken = 0
    /// Windows a step found elsewhere than its checkpoint and did not use.
    public var dropped = 0

    public init(taken: Int = 0, dropped: Int = 0) {
        self.taken = taken
        self.dropped = dropped
    }
}

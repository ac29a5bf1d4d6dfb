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
/// so those rows never change: the window is the start of what the next step would read
/// itself, and the step reads the rest of its share after it. A step takes the window only
/// when the projections' checkpoint, read under the projector's lock, is still that position;
/// anything else (another projector's step, a rebuild's swap, a step that rolled back) leaves
/// it elsewhere, and the window is dropped.
final class ReadAhead: Sendable {
    /// Rows read after `after`, in log order.
    struct Window: Sendable {
        var after: LogPosition
        var rows: Handed<QueryResult>
    }

    private let pool: ConnectionPool
    private let pending = Mutex<Task<Window, any Error>?>(nil)

    init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// Starts reading up to `limit` rows after `position` on a connection of its own.
    func start(after position: LogPosition, limit: Int) {
        let pool = self.pool
        guard let seq = Int64(position.seq) else { return }
        let task = Task {
            try await pool.withConnection { connection in
                let rows = try connection.transaction(begin: "BEGIN READ ONLY") {
                    try connection.execute(ProjectorSQL.plannerSettings)
                    return try LogLayout.singleNode.nextEvents(after: position.tx, seq, limit: limit, on: connection)
                }
                return Window(after: position, rows: Handed(.success(rows)))
            }
        }
        let replaced = pending.withLock { (pending: inout Task<Window, any Error>?) in
            defer { pending = task }
            return pending
        }
        replaced?.cancel()
    }

    /// The window started last, once read; `nil` when none was started or its read failed
    /// (the step then reads the log itself).
    func take() async -> Window? {
        guard let task = pending.withLock({ (task: inout Task<Window, any Error>?) in defer { task = nil }; return task }) else { return nil }
        return try? await task.value
    }
}

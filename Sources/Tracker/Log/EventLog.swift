import Logging
import Metrics
import ServiceLifecycle
import Synchronization

/// What one request's events became: newly stored, already stored (a duplicate id), or
/// refused by the database.
public struct AppendOutcome: Sendable, Hashable {
    public var stored: Int
    public var duplicates: Int
    /// Events the database refused for their content (their positions in the appended array):
    /// not stored, and a retry would be refused again. The others were stored.
    public var refused: [RefusedEvent] = []

    public init(stored: Int, duplicates: Int, refused: [RefusedEvent] = []) {
        self.stored = stored
        self.duplicates = duplicates
        self.refused = refused
    }
}

/// An event the database would not store, and why (without the server's text).
public struct RefusedEvent: Sendable, Hashable {
    /// Its position in the array given to `EventLog.append`.
    public var index: Int
    /// What a client can act on, naming the field when the database's error tells it.
    public var reason: String
}

/// Why events could not be appended. Nothing of the request was acknowledged.
public enum AppendError: Error, Sendable, Equatable {
    /// Too many events are waiting for the database: the client should retry shortly.
    case overloaded
    /// PostgreSQL (or, on Citus, a worker the write needs) is unreachable, restarting or busy:
    /// nothing was acknowledged, and a retry may succeed (`DatabaseError.transience`).
    case databaseUnavailable
    /// The server is shutting down and takes no new work.
    case shuttingDown
    /// The database refused the write for a reason retrying will not fix.
    case failed
}

/// The append-only event log: durable, idempotent appends grouped into few large writes.
///
/// Requests enqueue their validated events; `writers` tasks each take everything that is
/// waiting (up to `maxGroupEvents`) and store it in one transaction and one commit. No
/// request waits for a timer: a group is simply what arrived while the previous write ran,
/// so under light load a request is written at once and under heavy load commits are shared.
///
/// Which writer writes what, back-pressure, deadlines and the drain are decided by
/// `EventLogStateMachine` under one lock; this class is its shell: it parks and wakes writers,
/// runs the SQL, sets the deadlines' timer (a child of `run()`) and answers each request with
/// what the machine hands back.
public final class EventLog: Service, Sendable {
    public struct Configuration: Sendable {
        public var writers = 3
        public var maxGroupEvents = 5_000
        /// A second writer starts only when this many events wait; fewer wait for the write
        /// in flight. Small requests then share one commit (one WAL flush for everything that
        /// queued meanwhile) instead of splitting into small parallel commits, while large
        /// batches still overlap one write's CPU with another's flush.
        public var parallelWriteThreshold = 500
        /// Beyond this many waiting events, appends fail fast with `.overloaded` (bounded memory).
        public var maxQueuedEvents = 100_000
        /// An append not committed within this time fails with `.databaseUnavailable` (a 503):
        /// a frozen or locked database must not hold requests for ever. Events still queued
        /// are withdrawn, so nothing of them is stored; a write already sent is one transaction,
        /// so it commits whole or not at all, and a retry of it counts as duplicates.
        /// `nil`: no deadline.
        public var appendTimeout: Duration? = .seconds(8)
        public init() {}

        /// Session settings for the log's own connections (`ConnectionPool.sessionSetup`):
        /// durable commits whatever the database's or role's default (`synchronous_commit=off`
        /// there would make a 200 a lie), and statement and lock timeouts inside the append's
        /// deadline, so PostgreSQL itself cancels a write stuck behind a lock (nothing stored).
        /// PostgreSQL times each statement of a query string apart, and the plain append is two
        /// COPYs in one string: 3/8 of the deadline each keeps the pair within 3/4 of it, and a
        /// lock wait (1/4) within its statement. A group written twice (its plain append met a
        /// stored id) may finish after the deadline; the second statement is skipped when every
        /// request of the group has had its answer by then.
        ///
        /// On Citus, one connection per worker for a group's inserts: by default the coordinator
        /// opens a connection per shard a statement touches (a group of 100 ids touches every
        /// shard of `event_ids`), keeps one per worker after the transaction, and commits in two
        /// phases with every shard's connection, so an append would wait for a new connection
        /// per shard. Elsewhere the setting is an unused placeholder.
        public var sessionSetup: String {
            var sql = "SET synchronous_commit = on; SET citus.max_adaptive_executor_pool_size = 1"
            if let appendTimeout {
                let milliseconds = max(Int(appendTimeout / .milliseconds(1)), 2)
                sql += "; SET statement_timeout = \(max(milliseconds * 3 / 8, 1)); SET lock_timeout = \(max(milliseconds / 4, 1))"
            }
            return sql
        }
    }

    /// An append's events and its caller, waiting for a writer and then for its answer.
    private struct Submission: Sendable {
        var events: [TrackingEvent]
        var keyName: String
        var reply: @Sendable (Result<AppendOutcome, AppendError>) -> Void
    }

    private typealias Taken = TakenAppend<Submission>
    private typealias Machine = EventLogStateMachine<ContinuousClock, Submission, CheckedContinuation<[Taken]?, Never>>

    private let pool: ConnectionPool
    private let configuration: Configuration
    private let logger: Logger
    private let state: Mutex<Machine>
    /// The deadlines' timer, run by `run()`.
    private let timers = ServiceTasks()
    /// Time of one group's write and commit (the WAL flush included).
    private let commitDuration = Timer(label: "tracker_commit_duration_seconds")
    /// Events and requests sharing one commit: how well group commit groups.
    private let commitEvents = Recorder(label: "tracker_commit_events")
    private let commitRequests = Recorder(label: "tracker_commit_requests")
    /// Groups whose plain append met an id already stored and were written again.
    private let commitConflicts = Counter(label: "tracker_commit_conflicts_total")
    private let strategy = Mutex(AppendStrategy())
    /// The numbers of the user agents the log stores (`user_agents`).
    private let userAgentNumbers = UserAgentNumbers()

    public init(pool: ConnectionPool, configuration: Configuration = Configuration(), logger: Logger) {
        self.pool = pool
        self.configuration = configuration
        self.logger = logger
        state = Mutex(Machine(configuration, clock: ContinuousClock()))
    }

    /// Events accepted by requests and waiting for a writer (for the queue-depth gauge).
    public var queuedEvents: Int {
        state.withLock { $0.queuedEvents }
    }

    /// The most events that may wait; beyond it appends fail with `.overloaded`.
    public var queueCapacity: Int { configuration.maxQueuedEvents }

    /// Stores `events` durably; returns only after their commit.
    public func append(_ events: [TrackingEvent], keyName: String) async throws(AppendError) -> AppendOutcome {
        if events.isEmpty { return AppendOutcome(stored: 0, duplicates: 0) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<AppendOutcome, AppendError>, Never>) in
            append(events, keyName: keyName) { continuation.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Stores `events` durably and then calls `reply` with the outcome, once, on a thread of
    /// the log's (or at once, on the caller's, when the append is refused or has no events).
    /// For callers that are not tasks: a channel handler answers from its event loop without
    /// a task to resume in between.
    public func append(_ events: [TrackingEvent], keyName: String,
                       then reply: @escaping @Sendable (Result<AppendOutcome, AppendError>) -> Void) {
        if events.isEmpty { return reply(.success(AppendOutcome(stored: 0, duplicates: 0))) }
        let submission = Submission(events: events, keyName: keyName, reply: reply)
        switch state.withLock({ $0.submit(submission, events: events.count) }) {
        case .refused(let error): reply(.failure(error))
        case .accepted(_, let start, let timer):
            if let timer { schedule(timer) }
            start?.writer.resume(returning: start?.group)
        }
    }

    /// Runs the writers until graceful shutdown or cancellation of the calling task, then
    /// drains what was already accepted (each waiting append still gets its answer).
    ///
    /// The deadlines' timer is a child of this call, started before anything here can wait on
    /// the database, so deadlines hold from the first append to the last write of a graceful
    /// drain. Cancelling the call ends the timer with it: the drain's writes then answer their
    /// appends within the database's statement and lock timeouts (`sessionSetup`).
    public func run() async throws {
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withTaskGroup(of: Void.self) { background in
                    background.addTask { await self.timers.run() }
                    try? await pool.withConnection { connection in
                        _ = try connection.query(EventLogSQL.ensurePartitions)
                    }
                    background.addTask { await self.maintainPartitions() }
                    await withDiscardingTaskGroup { writers in
                        for _ in 0..<configuration.writers {
                            writers.addTask { await self.writerLoop() }
                        }
                    }
                    timers.finish()
                    background.cancelAll()
                }
            } onGracefulShutdown: {
                self.stop()
            }
        } onCancel: {
            // Writers wait on continuations, which cancellation does not reach: stop them, or a
            // task group whose other child threw would wait for this one for ever.
            self.stop()
        }
    }

    private func schedule(_ timer: ContinuousClock.Instant) {
        timers.schedule(at: timer, on: ContinuousClock()) { [weak self] in self?.timerFired() }
    }

    /// Answers `.databaseUnavailable` to each append whose deadline passed.
    private func timerFired() {
        let (expired, next) = state.withLock { $0.timerFired() }
        if let next { schedule(next) }
        for submission in expired { submission.reply(.failure(.databaseUnavailable)) }
    }

    /// Stops taking new events; writers finish the queue and return.
    public func stop() {
        for (writer, group) in state.withLock({ $0.stop() }) { writer.resume(returning: group) }
    }

    private func writerLoop() async {
        var afterWrite = false
        while let group = await nextGroup(afterWrite: afterWrite) {
            await write(group)
            afterWrite = true
        }
    }

    /// The next group to write, waiting for one if need be; `nil` once stopping and the queue is empty.
    private func nextGroup(afterWrite: Bool) async -> [Taken]? {
        await withCheckedContinuation { (writer: CheckedContinuation<[Taken]?, Never>) in
            switch state.withLock({ $0.writerReady(writer, afterWrite: afterWrite) }) {
            case .write(let group): writer.resume(returning: group)
            case .finish: writer.resume(returning: nil)
            case .park: break
            }
        }
    }

    /// Answers the appends of `group` still waiting for their answer, each with `answer(i)`
    /// (its position in the group).
    private func answer(_ group: [Taken], _ answer: (Int) -> Result<AppendOutcome, AppendError>) {
        let waiting = state.withLock { s in group.map { s.claim($0.id) } }
        for (i, submission) in waiting.enumerated() {
            submission?.reply(answer(i))
        }
    }

    private func write(_ group: [Taken]) async {
        let batch = AppendBatch(group.map { ($0.request.events, $0.request.keyName) })
        do {
            let started = ContinuousClock.now
            let ids = group.map(\.id)
            let stored = try await store(batch, abandoned: { self.state.withLock { $0.allAnswered(ids) } })
            commitDuration.recordNanoseconds((ContinuousClock.now - started).nanoseconds)
            commitEvents.record(group.reduce(0) { $0 + $1.request.events.count })
            commitRequests.record(group.count)
            answer(group) { i in .success(batch.outcome(of: i, stored: stored)) }
        } catch {
            let appendError = Self.classify(error)
            if appendError == .failed, group.count > 1 {
                // Something in the group was refused: write the submissions one by one so
                // only the one at fault fails, and the others are still acknowledged.
                logger.warning("group write failed; retrying its submissions one by one", metadata: ["tracker.error": "\(String(reflecting: error))"])
                for taken in group { await write([taken]) }
                return
            }
            if appendError == .failed, let taken = group.first, (error as? DatabaseError).map(Self.refusesContent) == true {
                // The database refused something the validator let through: find the events at
                // fault by halves, so one bad value costs its own event, not its batch forever.
                logger.warning("the database refused an event's content; isolating it", metadata: ["tracker.error": "\(String(reflecting: error))"])
                await isolate(taken)
                return
            }
            logger.error("event append failed", metadata: ["tracker.error": "\(String(reflecting: error))"])
            answer(group) { _ in .failure(appendError) }
        }
    }

    /// Writes a group; `abandoned` says whether every request of it has had its answer already
    /// (its deadline passed), so that a failed first statement is not followed by a second:
    /// those requests were told nothing was stored, and nothing was.
    private func store(_ batch: AppendBatch, abandoned: @escaping @Sendable () -> Bool) async throws -> StoredIds {
        do {
            return try await pool.withConnection { connection in
                try self.insert(batch, on: connection, abandoned: abandoned)
            }
        } catch let error as DatabaseError where error.state == .checkViolation {
            // No partition for this received_at yet (a clock jump, or the server ran for days
            // without its maintenance task): create them and write again.
            return try await pool.withConnection { connection in
                _ = try connection.query(EventLogSQL.ensurePartitions)
                if abandoned() { return .only([]) }
                return try self.insert(batch, on: connection, abandoned: abandoned)
            }
        }
    }

    /// One group, one commit: the plain append unless `strategy` says a stored id is likely;
    /// the conflict-checking statement when it is, or when the plain append met one.
    private func insert(_ batch: AppendBatch, on connection: Connection, abandoned: () -> Bool) throws -> StoredIds {
        let agents = try userAgentNumbers.numbers(for: batch.userAgents, on: connection)
        if strategy.withLock({ $0.triesPlainAppend }) {
            if try Self.appendAllNew(batch.copyData(userAgentIds: agents), on: connection) { return .all }
            // An id is stored already (a retry): nothing of the group was; write it again below.
            commitConflicts.increment()
            if abandoned() {
                strategy.withLock { $0.record(metStoredId: true) }
                return .only([])
            }
        }
        let stored = try Self.insertCheckingConflicts(batch.parameters(userAgentIds: agents), on: connection)
        strategy.withLock { $0.record(metStoredId: stored.count < batch.sentCount) }
        return .only(stored)
    }

    /// The plain append; `false` when it met a stored id (and stored nothing).
    private static func appendAllNew(_ data: (ids: [UInt8], events: [UInt8]), on connection: Connection) throws(DatabaseError) -> Bool {
        do {
            try connection.copyIn(EventLogSQL.appendByCopy, each: [data.ids, data.events])
            return true
        } catch {
            if EventLogSQL.metStoredId(error) { return false }
            throw error
        }
    }

    /// Whether the next group is written with the conflict-checking statement (for tests).
    var checksConflictsNext: Bool { !strategy.withLock { $0.triesPlainAppend } }

    private static func insertCheckingConflicts(_ parameters: [Parameter], on connection: Connection) throws -> Set<PackedUUID> {
        // The append's mark goes after the rows, in the same transaction; this path is taken
        // only after a retry met a stored id, so its three more round trips are rare.
        let result = try connection.transaction {
            let stored = try connection.query(EventLogSQL.appendCheckingConflicts, parameters, binaryResults: true)
            try connection.execute(EventLogSQL.markAppend)
            return stored
        }
        var stored = Set<PackedUUID>(minimumCapacity: result.rowCount)
        for row in 0..<result.rowCount {
            let bytes = result.bytes(row, 0)
            guard bytes.count == 16 else { throw DatabaseError(.unexpectedResult, serverMessage: "append: a stored id of \(bytes.count) bytes") }
            stored.insert(PackedUUID(binary: bytes))
        }
        return stored
    }

    /// Stores a submission in halves down to the single events the database refuses; answers
    /// with what was stored and what was refused (each part is its own commit).
    private func isolate(_ taken: Taken) async {
        let submission = taken.request
        var stored = 0
        var refused: [RefusedEvent] = []
        do {
            try await storeIsolating(submission.events[...], keyName: submission.keyName, stored: &stored, refused: &refused)
        } catch {
            logger.error("event append failed", metadata: ["tracker.error": "\(String(reflecting: error))"])
            answer([taken]) { _ in .failure(Self.classify(error)) }
            return
        }
        answer([taken]) { _ in
            .success(AppendOutcome(stored: stored, duplicates: submission.events.count - stored - refused.count, refused: refused))
        }
    }

    private func storeIsolating(_ events: ArraySlice<TrackingEvent>, keyName: String, stored: inout Int, refused: inout [RefusedEvent]) async throws {
        let batch = AppendBatch([(Array(events), keyName)])
        do {
            stored += batch.outcome(of: 0, stored: try await store(batch, abandoned: { false })).stored
        } catch let error as DatabaseError where Self.refusesContent(error) {
            if events.count == 1 {
                refused.append(RefusedEvent(index: events.startIndex, reason: Self.reason(error)))
                return
            }
            let middle = events.startIndex + events.count / 2
            try await storeIsolating(events[..<middle], keyName: keyName, stored: &stored, refused: &refused)
            try await storeIsolating(events[middle...], keyName: keyName, stored: &stored, refused: &refused)
        }
    }

    /// The database refused the data itself (class 22 data exception, 23 integrity constraint,
    /// 54 program limit): the same rows would be refused again, unlike a lost connection.
    static func refusesContent(_ error: DatabaseError) -> Bool {
        guard let state = error.state else { return false }
        return ["22", "23", "54"].contains(state.errorClass)
    }

    /// A refusal a client can act on, from the SQLSTATE (the server's own text stays in the log).
    static func reason(_ error: DatabaseError) -> String {
        let state = error.sqlState ?? "?"
        let what = switch error.state {
        case .numericValueOutOfRange?: "attributes holds a number outside what the log can store"
        case .untranslatableCharacter?, .characterNotInRepertoire?: "a text field or an attribute holds a character the log cannot store"
        case .datetimeFieldOverflow?: "a time is outside what the log can store"
        case .stringDataRightTruncation?, .programLimitExceeded?: "a field is larger than the log can store"
        default: "the log cannot store this event"
        }
        return "\(what) (the database refused it: SQLSTATE \(state)); it was not stored and a retry would be refused again"
    }

    /// The answer to a failed write: `databaseUnavailable` for every failure a retry may not
    /// meet (`DatabaseError.transience`), `failed` for the rest.
    static func classify(_ error: any Error) -> AppendError {
        if let db = error as? DatabaseError {
            if db.code == .poolClosed { return .shuttingDown }
            return db.isTransient ? .databaseUnavailable : .failed
        }
        return .failed
    }

    /// Keeps a week of partitions ahead of the clock.
    private func maintainPartitions() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: .seconds(60)) } catch { return }
            do {
                try await pool.withConnection { _ = try $0.query(EventLogSQL.ensurePartitions) }
            } catch {
                logger.debug("partition maintenance failed", metadata: ["tracker.error": "\(String(reflecting: error))"])
            }
        }
    }
}

/// One waiting event: where its JSON is, how long it is, when it was recorded.
struct QueuedEvent: Sendable {
    enum Storage: Sendable {
        case file(segment: UInt64, offset: Int)
        /// Storage failed when it was recorded: only this process can still deliver it.
        case memory([UInt8])
    }

    var sequence: UInt64
    var storage: Storage
    var length: Int
    var enqueuedAt: Int64

    /// What it takes on disk (or in memory): the record header and the JSON.
    var bytes: Int { QueueFiles.headerBytes + length }
}

/// An event of a batch taken for one request: its JSON, or nil when its record could not be
/// read back intact.
struct BatchEvent: Sendable {
    var sequence: UInt64
    var payload: [UInt8]?
}

/// What the delivery task should do next.
enum DeliveryPlan: Equatable {
    case send
    /// Nothing is due; the oldest event is due at this wall-clock time (nil: queue empty).
    case wait(dueWallMicros: Int64?)
    /// Delivery is stopped until `resume()`.
    case stopped
}

/// The queue of events waiting for delivery: an in-memory index in front of the files.
///
/// The recording calls append (synchronously, one `pwrite`, no `fsync`); the one delivery
/// task takes batches from the front and completes or releases them. A batch in flight is
/// always a prefix of the queue, so completing it is removing a prefix and moving the cursor.
/// The limits drop from the front too, but never events in flight: while a request is out,
/// the queue may pass its limits by what is recorded meanwhile, and is trimmed when it returns.
final class EventQueue: Sendable {
    private struct State {
        var events = EventList()
        var bytes = 0
        var nextSequence: UInt64 = 0
        /// Events at the front carried by the request in flight.
        var inFlight = 0
        var writer: SegmentFile?
        var writerSize = 0
        /// Segment files that may hold waiting events, ascending (the writer's included).
        var segments: [UInt64] = []
        var nextSegment: UInt64 = 0
        var unsynced: [SegmentFile] = []
        var folderChanged = false
        var cursorDirty = false
        var storageFailing = false
        var statistics = AdTracker.Statistics()
        var stop: AdTracker.StopReason?
        /// The next attempt after a failure (monotonic), kept here so that whichever task
        /// delivers next (`run()`, a `flush()`) honours it.
        var retry: (until: Duration, reason: AdTracker.RetryReason)?
        /// Failed attempts since the last answered one: the backoff's exponent.
        var failures = 0
        var flushThrough: UInt64?
        var flushWaiters: [(through: UInt64, ticket: FlushTicket)] = []
        /// Whether a task delivers now (`run()`, or a `flush()` standing in for it).
        var delivering = false
        /// `run()` calls waiting for the delivering task to finish.
        var deliveryQueue: [(id: Int, continuation: CheckedContinuation<Bool, Never>)] = []
        var nextDeliveryID = 0
    }

    let files: QueueFiles?
    let limits: AdTracker.QueueLimits
    let flushAt: Int
    let segmentBytes: Int
    let clock: any TrackerClock
    let notices: AsyncStream<AdTracker.Notice>.Continuation
    /// Tells the delivery task that a batch may be due (first event, `flushAt` reached, a
    /// flush asked for, delivery resumed).
    let wakeup = Wakeup()
    private let state: Locked<State>

    /// A queue over `files` holding what `recovery` found there; with `files` nil (storage
    /// could not be opened) a queue in memory only.
    init(files: QueueFiles?, recovery: Recovery, limits: AdTracker.QueueLimits, flushAt: Int, segmentBytes: Int,
         clock: any TrackerClock, notices: AsyncStream<AdTracker.Notice>.Continuation) {
        self.files = files
        self.limits = limits
        self.flushAt = max(1, flushAt)
        self.segmentBytes = segmentBytes
        self.clock = clock
        self.notices = notices
        var s = State()
        for record in recovery.records {
            let event = QueuedEvent(sequence: s.nextSequence, storage: .file(segment: record.segment, offset: record.offset),
                                    length: record.length, enqueuedAt: record.enqueuedAt)
            s.events.append(event)
            s.bytes += event.bytes
            s.nextSequence += 1
        }
        s.segments = recovery.segments
        s.nextSegment = recovery.nextSegment
        s.statistics.recovered = recovery.records.count
        s.statistics.damagedBytes = recovery.damagedBytes
        s.storageFailing = files == nil
        var pending: [AdTracker.Notice] = []
        Self.trim(&s, now: clock.wallMicros(), limits: limits, files: files, notices: &pending)
        s.cursorDirty = true
        state = Locked(s)
        for notice in pending { notices.yield(notice) }
    }

    // MARK: Recording

    /// Appends one event's JSON. Returns once it is in the file (or, when storage fails, in
    /// memory); never waits for the network or an `fsync`.
    func append(_ payload: [UInt8], enqueuedAt: Int64) {
        let frame = files == nil ? [] : QueueFiles.frame(payload: payload, enqueuedAt: enqueuedAt)
        var pending: [AdTracker.Notice] = []
        let wake = state.withLock { s -> Bool in
            let wasSynced = s.unsynced.isEmpty
            let storage = store(frame, payload: payload, in: &s, notices: &pending)
            let event = QueuedEvent(sequence: s.nextSequence, storage: storage, length: payload.count, enqueuedAt: enqueuedAt)
            s.events.append(event)
            s.bytes += event.bytes
            s.nextSequence += 1
            s.statistics.recorded += 1
            Self.trim(&s, now: enqueuedAt, limits: limits, files: files, notices: &pending)
            // The delivery task plans anew when the first event waits (the flush timer starts),
            // when flushAt is reached, and when a write awaits its sync.
            let waiting = s.events.count - s.inFlight
            return waiting == 1 || waiting == flushAt || (wasSynced && !s.unsynced.isEmpty)
        }
        for notice in pending { notices.yield(notice) }
        if wake { wakeup.signal() }
    }

    private func store(_ frame: [UInt8], payload: [UInt8], in s: inout State, notices: inout [AdTracker.Notice]) -> QueuedEvent.Storage {
        guard let files else { return .memory(payload) }
        if s.writer == nil || s.writerSize >= segmentBytes {
            let number = s.nextSegment
            s.nextSegment += 1
            switch files.create(segment: number) {
            case .success(let file):
                s.writer = file
                s.writerSize = 0
                s.segments.append(number)
                s.folderChanged = true
            case .failure(let failure):
                // A full writer stays in use past its size: better a long file than memory.
                if s.writer == nil { return storageFailed(failure.code, payload, &s, &notices) }
            }
        }
        guard let writer = s.writer else { return .memory(payload) }
        if let failure = files.write(frame, to: writer, at: s.writerSize) {
            if !failure.fileUsable { s.writer = nil }
            return storageFailed(failure.errno, payload, &s, &notices)
        }
        let offset = s.writerSize
        s.writerSize += frame.count
        if s.unsynced.last !== writer { s.unsynced.append(writer) }
        if s.storageFailing {
            s.storageFailing = false
            notices.append(.storageRecovered)
        }
        return .file(segment: writer.number, offset: offset)
    }

    private func storageFailed(_ code: Int32, _ payload: [UInt8], _ s: inout State, _ notices: inout [AdTracker.Notice]) -> QueuedEvent.Storage {
        if !s.storageFailing {
            s.storageFailing = true
            notices.append(.storageFailing(errno: code))
        }
        return .memory(payload)
    }

    /// An event the client will not send (over the server's per-event limit): counted and
    /// announced as rejected, like one the server refused.
    func rejectUnsent(_ event: AdTracker.RejectedEvent) {
        state.withLock { s in
            s.statistics.recorded += 1
            s.statistics.rejected += 1
        }
        notices.yield(.rejected(event))
    }

    // MARK: Delivery

    /// Takes the delivery role for `run()`, waiting while another task holds it; false when
    /// the task is cancelled first.
    func acquireDelivery() async -> Bool {
        let id = state.withLock { s in
            s.nextDeliveryID += 1
            return s.nextDeliveryID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let granted = state.withLock { s -> Bool? in
                    if Task.isCancelled { return false }
                    if !s.delivering {
                        s.delivering = true
                        return true
                    }
                    s.deliveryQueue.append((id, continuation))
                    return nil
                }
                if let granted { continuation.resume(returning: granted) }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let i = s.deliveryQueue.firstIndex(where: { $0.id == id }) else { return nil }
                return s.deliveryQueue.remove(at: i).continuation
            }
            waiter?.resume(returning: false)
        }
    }

    /// Gives up the delivery role: to the next waiting `run()`, or, when a `flush()` holds it
    /// (`onlyWhenFlushed`), only once no flush waits any more (false: keep delivering). When
    /// nobody takes over, waiting flushes learn that nothing delivers now.
    func releaseDelivery(onlyWhenFlushed: Bool = false) -> Bool {
        var orphans: [(through: UInt64, ticket: FlushTicket)] = []
        var successor: CheckedContinuation<Bool, Never>?
        let released = state.withLock { s -> Bool in
            if onlyWhenFlushed && !s.flushWaiters.isEmpty && s.deliveryQueue.isEmpty { return false }
            if s.deliveryQueue.isEmpty {
                s.delivering = false
                orphans = s.flushWaiters
                s.flushWaiters = []
            } else {
                successor = s.deliveryQueue.removeFirst().continuation
            }
            return true
        }
        successor?.resume(returning: true)
        for waiter in orphans { waiter.ticket.resolve(.notRunning) }
        return released
    }

    func plan(flushInterval: Duration) -> DeliveryPlan {
        let now = clock.wallMicros()
        var pending: [AdTracker.Notice] = []
        var finished: [(FlushTicket, AdTracker.FlushOutcome)] = []
        let plan = state.withLock { s -> DeliveryPlan in
            if s.stop != nil { return .stopped }
            Self.trim(&s, now: now, limits: limits, files: files, notices: &pending)
            finished = resolveFlushWaiters(&s)
            guard let first = s.events.first else { return .wait(dueWallMicros: nil) }
            if let through = s.flushThrough, first.sequence <= through { return .send }
            let due = first.enqueuedAt + flushInterval.micros
            guard s.events.count >= flushAt || due <= now else { return .wait(dueWallMicros: due) }
            // Once a batch is due, everything recorded until now goes without waiting again,
            // even when it takes several requests (a backlog, a batch halved after a 413).
            s.flushThrough = s.nextSequence - 1
            return .send
        }
        for notice in pending { notices.yield(notice) }
        for (ticket, outcome) in finished { ticket.resolve(outcome) }
        return plan
    }

    /// Takes up to `maxEvents` events from the front, within `maxBodyBytes` of JSON, for one
    /// request. Nil when nothing waits.
    func take(maxEvents: Int, maxBodyBytes: Int) -> [BatchEvent]? {
        let picked = state.withLock { s -> [QueuedEvent] in
            precondition(s.inFlight == 0, "one batch in flight at a time")
            s.retry = nil
            var count = 0
            var body = 64
            for event in s.events.prefix(max(1, maxEvents)) {
                if count > 0 && body + event.length + 1 > maxBodyBytes { break }
                body += event.length + 1
                count += 1
            }
            s.inFlight = count
            return Array(s.events.prefix(count))
        }
        guard !picked.isEmpty else { return nil }
        return read(picked)
    }

    /// The payloads of `events`, reading the files one contiguous run per segment.
    private func read(_ events: [QueuedEvent]) -> [BatchEvent] {
        var out: [BatchEvent] = []
        out.reserveCapacity(events.count)
        var run: [QueuedEvent] = []
        func flushRun() {
            guard let first = run.first, case .file(let segment, _) = first.storage else { return }
            let ranges = run.map { event -> (offset: Int, length: Int) in
                guard case .file(_, let offset) = event.storage else { preconditionFailure() }
                return (offset, event.length)
            }
            let payloads = files?.read(segment: segment, ranges) ?? run.map { _ in nil }
            for (event, payload) in zip(run, payloads) { out.append(BatchEvent(sequence: event.sequence, payload: payload)) }
            run = []
        }
        for event in events {
            switch event.storage {
            case .memory(let payload):
                flushRun()
                out.append(BatchEvent(sequence: event.sequence, payload: payload))
            case .file(let segment, _):
                if let first = run.first, case .file(let runSegment, _) = first.storage, runSegment != segment { flushRun() }
                run.append(event)
            }
        }
        flushRun()
        return out
    }

    /// The request for the batch in flight was answered for good: its first `count` events
    /// leave the queue (stored, duplicates, rejected or unreadable).
    func complete(_ count: Int, accepted: Int, duplicates: Int, rejected: [AdTracker.RejectedEvent], damaged: Int, answered: Bool) {
        var pending: [AdTracker.Notice] = []
        let waiters = state.withLock { s -> [(FlushTicket, AdTracker.FlushOutcome)] in
            precondition(count <= s.inFlight)
            for _ in 0..<count {
                s.bytes -= s.events.removeFirst().bytes
            }
            s.inFlight = 0
            s.failures = 0
            s.statistics.accepted += accepted
            s.statistics.duplicates += duplicates
            s.statistics.rejected += rejected.count
            if damaged > 0 {
                s.statistics.dropped[.damaged, default: 0] += damaged
                pending.append(.dropped(count: damaged, reason: .damaged))
            }
            s.cursorDirty = true
            Self.removeConsumedSegments(&s, files: files)
            Self.trim(&s, now: clock.wallMicros(), limits: limits, files: files, notices: &pending)
            return resolveFlushWaiters(&s)
        }
        if answered { notices.yield(.delivered(accepted: accepted, duplicates: duplicates)) }
        for event in rejected { notices.yield(.rejected(event)) }
        for notice in pending { notices.yield(notice) }
        for (ticket, outcome) in waiters { ticket.resolve(outcome) }
    }

    /// The batch in flight goes back to the front of the queue, to be sent again.
    func release() {
        var pending: [AdTracker.Notice] = []
        let finished = state.withLock { s in
            s.inFlight = 0
            Self.trim(&s, now: clock.wallMicros(), limits: limits, files: files, notices: &pending)
            return resolveFlushWaiters(&s)
        }
        for notice in pending { notices.yield(notice) }
        for (ticket, outcome) in finished { ticket.resolve(outcome) }
    }

    /// A request failed; the next attempt is at `until` on the monotonic clock.
    /// Counts a failed attempt; the number of failures in a row.
    func recordFailure() -> Int {
        state.withLock { s in
            s.failures += 1
            return s.failures
        }
    }

    /// When the next attempt may be made, if a failure set one.
    var retryUntil: Duration? {
        state.withLock { $0.retry?.until }
    }

    func retrying(until: Duration, after: Duration, reason: AdTracker.RetryReason) {
        let waiters = state.withLock { s in
            s.retry = (until, reason)
            s.statistics.retries += 1
            defer { s.flushWaiters = [] }
            return s.flushWaiters
        }
        notices.yield(.retrying(after: after, reason: reason))
        for waiter in waiters { waiter.ticket.resolve( .willRetry(after: after, reason: reason)) }
    }

    func countRequest() {
        state.withLock { $0.statistics.requests += 1 }
    }

    /// Delivery stops until `resume()`.
    func stop(_ reason: AdTracker.StopReason) {
        let waiters = state.withLock { s in
            s.stop = reason
            defer { s.flushWaiters = [] }
            return s.flushWaiters
        }
        notices.yield(.stopped(reason))
        for waiter in waiters { waiter.ticket.resolve( .stopped(reason)) }
    }

    func resume() {
        state.withLock { $0.stop = nil }
        wakeup.signal()
    }

    /// Asks for everything recorded so far to be sent now. Returns the ticket to wait on, and
    /// whether the caller must deliver itself (no task delivers now: it takes the role).
    func requestFlush() -> (ticket: FlushTicket, deliver: Bool) {
        let now = clock.monotonic()
        let ticket = FlushTicket()
        let (immediate, deliver) = state.withLock { s -> (AdTracker.FlushOutcome?, Bool) in
            if let stop = s.stop { return (.stopped(stop), false) }
            // A flush does not cut a backoff short; once it has passed, the flush goes.
            if let retry = s.retry, s.delivering || retry.until > now {
                return (.willRetry(after: max(.zero, retry.until - now), reason: retry.reason), false)
            }
            guard s.events.count > 0 else { return (.delivered, false) }
            let through = s.nextSequence - 1
            s.flushThrough = max(s.flushThrough ?? 0, through)
            s.flushWaiters.append((through, ticket))
            if s.delivering { return (nil, false) }
            s.delivering = true
            return (nil, true)
        }
        if let immediate { ticket.resolve(immediate) } else { wakeup.signal() }
        return (ticket, deliver)
    }

    /// Whether a `flush()` waits for its events.
    var hasFlushWaiters: Bool {
        state.withLock { !$0.flushWaiters.isEmpty }
    }

    // MARK: Files

    /// Whether some queue writes are not yet forced to storage.
    var hasUnsyncedWrites: Bool {
        state.withLock { !$0.unsynced.isEmpty || $0.folderChanged }
    }

    /// Writes the cursor when it moved and, with `sync`, forces the queue's writes to storage;
    /// called by the delivery task, so the recording calls never wait for it.
    func maintain(sync: Bool) {
        guard let files else { return }
        let (cursor, unsynced, folder) = state.withLock { s -> (QueueCursor?, [SegmentFile], Bool) in
            var cursor: QueueCursor?
            if s.cursorDirty {
                s.cursorDirty = false
                cursor = Self.cursor(s)
            }
            guard sync else { return (cursor, [], false) }
            defer {
                s.unsynced = []
                s.folderChanged = false
            }
            return (cursor, s.unsynced, s.folderChanged)
        }
        for file in unsynced { files.sync(file, folder: false) }
        if folder { files.sync(nil, folder: true) }
        if let cursor { files.writeCursor(cursor) }
    }

    var statistics: AdTracker.Statistics {
        state.withLock { s in
            var out = s.statistics
            out.pending = s.events.count
            out.pendingBytes = s.bytes
            out.pendingInMemory = s.events.countInMemory
            return out
        }
    }

    // MARK: Rules

    /// Drops events from the front while the queue is over a limit (never one in flight).
    private static func trim(_ s: inout State, now: Int64, limits: AdTracker.QueueLimits, files: QueueFiles?,
                             notices: inout [AdTracker.Notice]) {
        guard s.inFlight == 0 else { return }
        let oldest = now - limits.maxAge.micros
        var dropped: [AdTracker.DropReason: Int] = [:]
        while let first = s.events.first {
            let reason: AdTracker.DropReason
            if s.events.count > limits.maxEvents {
                reason = .eventLimit
            } else if s.bytes > limits.maxBytes {
                reason = .byteLimit
            } else if first.enqueuedAt < oldest {
                reason = .tooOld
            } else {
                break
            }
            s.bytes -= s.events.removeFirst().bytes
            dropped[reason, default: 0] += 1
        }
        guard !dropped.isEmpty else { return }
        for reason in AdTracker.DropReason.allCases {
            guard let count = dropped[reason] else { continue }
            s.statistics.dropped[reason, default: 0] += count
            notices.append(.dropped(count: count, reason: reason))
        }
        s.cursorDirty = true
        removeConsumedSegments(&s, files: files)
    }

    /// Removes the segment files wholly before the first waiting event.
    private static func removeConsumedSegments(_ s: inout State, files: QueueFiles?) {
        guard let files else { return }
        let firstNeeded = s.events.firstFileSegment ?? s.writer?.number ?? s.nextSegment
        while let oldest = s.segments.first, oldest < firstNeeded, oldest != s.writer?.number {
            files.remove(segment: oldest)
            s.segments.removeFirst()
            s.folderChanged = true
        }
    }

    /// Where reading must start after a restart: the first waiting event in a file, else the
    /// end of what was written.
    private static func cursor(_ s: State) -> QueueCursor {
        if let (segment, offset) = s.events.firstFileLocation { return QueueCursor(segment: segment, offset: offset) }
        if let writer = s.writer { return QueueCursor(segment: writer.number, offset: s.writerSize) }
        return QueueCursor(segment: s.nextSegment, offset: 0)
    }

    /// The `flush()` calls whose events have all left the queue, with their outcome.
    private func resolveFlushWaiters(_ s: inout State) -> [(FlushTicket, AdTracker.FlushOutcome)] {
        let head = s.events.first?.sequence ?? s.nextSequence
        if let through = s.flushThrough, through < head { s.flushThrough = nil }
        var done: [(FlushTicket, AdTracker.FlushOutcome)] = []
        s.flushWaiters.removeAll { waiter in
            guard waiter.through < head else { return false }
            done.append((waiter.ticket, .delivered))
            return true
        }
        return done
    }
}

/// A FIFO list with O(1) removal at the front.
struct EventList {
    private var items: [QueuedEvent] = []
    private var start = 0

    var count: Int { items.count - start }
    var first: QueuedEvent? { start < items.count ? items[start] : nil }

    mutating func append(_ event: QueuedEvent) {
        items.append(event)
    }

    @discardableResult
    mutating func removeFirst() -> QueuedEvent {
        let event = items[start]
        start += 1
        if start > 1024 && start * 2 > items.count {
            items.removeFirst(start)
            start = 0
        }
        return event
    }

    func prefix(_ n: Int) -> ArraySlice<QueuedEvent> {
        items[start..<min(items.count, start + n)]
    }

    var firstFileLocation: (UInt64, Int)? {
        for event in items[start...] {
            if case .file(let segment, let offset) = event.storage { return (segment, offset) }
        }
        return nil
    }

    var firstFileSegment: UInt64? { firstFileLocation?.0 }

    var countInMemory: Int {
        items[start...].reduce(0) { n, event in
            if case .memory = event.storage { return n + 1 }
            return n
        }
    }
}

extension Duration {
    /// Whole microseconds (rounded toward zero).
    var micros: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000 + attoseconds / 1_000_000_000_000
    }
}

/// What one `flush()` waits for: resolved once, by whichever task learns the outcome first.
final class FlushTicket: Sendable {
    private let state = Locked<(outcome: AdTracker.FlushOutcome?, waiter: CheckedContinuation<AdTracker.FlushOutcome, Never>?)>((nil, nil))

    func resolve(_ outcome: AdTracker.FlushOutcome) {
        let waiter = state.withLock { s -> CheckedContinuation<AdTracker.FlushOutcome, Never>? in
            guard s.outcome == nil else { return nil }
            s.outcome = outcome
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume(returning: outcome)
    }

    func outcome() async -> AdTracker.FlushOutcome {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { s -> AdTracker.FlushOutcome? in
                if s.outcome == nil { s.waiter = continuation }
                return s.outcome
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

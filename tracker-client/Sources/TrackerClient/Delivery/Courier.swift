import Foundation

/// The delivery loop: waits until a batch is due, sends it, and acts on the answer.
///
/// One batch is in flight at a time, from the front of the queue, so events arrive in the
/// order they were recorded and a completed batch is a prefix of the queue.
struct Courier: Sendable {
    let queue: EventQueue
    let transport: any IngestTransport
    let clock: any TrackerClock
    let configuration: AdTracker.Configuration
    /// Uniform in [0, 1): the jitter of the backoff.
    let random: @Sendable () -> Double

    private var limits: IngestLimits { IngestLimits() }

    /// Delivers until the task is cancelled. While another task delivers (an earlier `run()`,
    /// a `flush()` standing in), waits for its turn.
    func run() async {
        guard await queue.acquireDelivery() else { return }
        await deliver(untilFlushed: false)
        _ = queue.releaseDelivery()
    }

    /// `flush()`: sends everything recorded so far, delivering itself when no task does.
    func flush() async -> AdTracker.FlushOutcome {
        let (ticket, mustDeliver) = queue.requestFlush()
        if mustDeliver {
            repeat {
                await deliver(untilFlushed: true)
            } while !queue.releaseDelivery(onlyWhenFlushed: !Task.isCancelled)
        }
        return await ticket.outcome()
    }

    /// The delivery loop, holding the delivery role: until the task is cancelled, or with
    /// `untilFlushed` as soon as no `flush()` waits.
    private func deliver(untilFlushed: Bool) async {
        let largestBatch = max(1, min(configuration.maxBatchEvents, limits.maxEventsPerBatch))
        var batchCap = largestBatch
        var retryAt = queue.retryUntil
        var lastSync = clock.monotonic()
        func done() -> Bool { Task.isCancelled || (untilFlushed && !queue.hasFlushWaiters) }
        while !done() {
            let now = clock.monotonic()
            let syncDue = configuration.syncInterval.map { now - lastSync >= $0 } ?? false
            queue.maintain(sync: syncDue)
            if syncDue { lastSync = now }
            // Writes are forced to storage on time even while delivery waits or is stopped.
            var syncDeadline: Duration?
            if let interval = configuration.syncInterval, queue.hasUnsyncedWrites { syncDeadline = lastSync + interval }

            if let until = retryAt, now < until {
                if untilFlushed { break }
                // New events do not cut the backoff short, but a write still gets its sync.
                await idle(until: min(until, syncDeadline ?? until))
                continue
            }
            retryAt = nil

            let plan = queue.plan(flushInterval: configuration.flushInterval)
            if plan != .send && done() { break }
            switch plan {
            case .stopped:
                await idle(until: syncDeadline)
            case .wait(let dueWall):
                var deadline = syncDeadline
                if let dueWall {
                    // The flush timer runs on the monotonic clock; a wall clock set back cannot stretch it.
                    let wait = Duration.microseconds(max(0, dueWall - clock.wallMicros()))
                    let due = now + min(wait, configuration.flushInterval)
                    deadline = min(due, deadline ?? due)
                }
                await idle(until: deadline)
            case .send:
                switch await sendOneBatch(maxEvents: batchCap) {
                case .delivered:
                    batchCap = min(batchCap * 2, largestBatch)
                case .shrink(let events):
                    batchCap = max(1, events / 2)
                case .retry(let retryAfter, let reason):
                    let failures = queue.recordFailure()
                    let delay = configuration.backoff.delay(afterFailures: failures, retryAfter: retryAfter, random: random())
                    retryAt = clock.monotonic() + delay
                    queue.retrying(until: retryAt!, after: delay, reason: reason)
                case .stopped, .cancelled, .nothing:
                    break
                }
            }
        }
        queue.maintain(sync: configuration.syncInterval != nil)
    }

    /// Waits for a signal from the queue, or until `deadline` on the monotonic clock.
    private func idle(until deadline: Duration?) async {
        guard let deadline else {
            await queue.wakeup.wait()
            return
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await clock.sleep(until: deadline) }
            group.addTask { await queue.wakeup.wait() }
            _ = await group.next()
            group.cancelAll()
        }
    }

    enum Outcome {
        case delivered
        case shrink(events: Int)
        case retry(after: Duration?, reason: AdTracker.RetryReason)
        case stopped
        case cancelled
        case nothing
    }

    /// One request: the batch at the front, stamped with `sentAt` now.
    func sendOneBatch(maxEvents: Int) async -> Outcome {
        guard let batch = queue.take(maxEvents: maxEvents, maxBodyBytes: limits.maxBodyBytes) else { return .nothing }
        let sent = batch.compactMap(\.payload)
        let damaged = batch.count - sent.count
        guard !sent.isEmpty else {
            queue.complete(batch.count, accepted: 0, duplicates: 0, rejected: [], damaged: damaged, answered: false)
            return .delivered
        }
        let body = Gzip.compress(BatchBody.make(sentAtMicros: clock.wallMicros(), events: sent))
        queue.countRequest()
        let result: Result<IngestResponse, any Error>
        do {
            result = .success(try await transport.post(body))
        } catch {
            if Task.isCancelled {
                queue.release()
                return .cancelled
            }
            result = .failure(error)
        }
        switch Verdict.judge(result, events: sent.count, wallMicros: clock.wallMicros()) {
        case .delivered(let receipt):
            let rejected = receipt.rejected.compactMap { r -> AdTracker.RejectedEvent? in
                guard sent.indices.contains(r.index) else { return nil }
                return Self.rejectedEvent(sent[r.index], status: 200, message: r.error)
            }
            queue.complete(batch.count, accepted: receipt.accepted, duplicates: receipt.duplicates, rejected: rejected,
                           damaged: damaged, answered: true)
            return .delivered
        case .shrink:
            queue.release()
            return .shrink(events: sent.count)
        case .rejectSole(let status, let message):
            queue.complete(batch.count, accepted: 0, duplicates: 0,
                           rejected: [Self.rejectedEvent(sent[0], status: status, message: message)], damaged: damaged, answered: false)
            return .delivered
        case .retry(let after, let reason):
            queue.release()
            return .retry(after: after, reason: reason)
        case .stop(let reason):
            queue.release()
            queue.stop(reason)
            return .stopped
        }
    }

    /// The event's id is the first member of every record the client writes.
    static func rejectedEvent(_ payload: [UInt8], status: Int, message: String) -> AdTracker.RejectedEvent {
        let prefix = Array("{\"id\":\"".utf8)
        var id = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        if payload.count >= prefix.count + 36, Array(payload[0..<prefix.count]) == prefix,
           let parsed = UUID(uuidString: String(decoding: payload[prefix.count..<(prefix.count + 36)], as: UTF8.self)) {
            id = parsed
        }
        return AdTracker.RejectedEvent(id: id, status: status, message: message, event: String(decoding: payload, as: UTF8.self))
    }
}

import HTTPTypes
import Synchronization

/// A token bucket per key: `eventsPerSecond` sustained, one second of burst, refused at the
/// request head.
///
/// `TRACKER_RATE_LIMIT` events per second per key on each node (`ServeDefaults.rateLimit`
/// unless set; `off`: no limit). The one decision is made before the body is read:
/// a key with less than one event left gets `429` with `Retry-After`. A request let through
/// reserves at once the valid events its body can carry at most (from its length, at most a
/// batch's limit), so requests in flight together cannot pass the key's limit with valid
/// events; once the batch is decoded the reservation is settled to the events it carried, valid
/// or not (invalid ones can be a few bytes each: what a reservation missed becomes debt). The
/// balance may go below zero: the key then waits until the debt is repaid, so over time it
/// sends at most its limit, and a batch larger than the bucket is not refused forever (every
/// retry of it would have been). A batch refused whole (not JSON, over a limit, the database
/// unavailable) gets its charge back.
///
/// Both the decision and the reservation are usually made on the event loop, by
/// `QuickAnswers`, which hands the reservation to the route with the admitted batch
/// (`AdmittedBatch`). They are made together so that the next head of the key already sees
/// the events taken: a head let through is never refused later by the route, after waiting for
/// a task, and a refusal never waits behind other batches' decoding.
final class RateLimiter: Sendable {
    let eventsPerSecond: Int
    private let buckets = Mutex<[String: (tokens: Double, updated: ContinuousClock.Instant)]>([:])

    init(eventsPerSecond: Int) {
        self.eventsPerSecond = eventsPerSecond
    }

    /// Takes `events` from `key`'s bucket (into debt if it holds fewer) unless it has less than
    /// one event left: then the whole seconds to wait, and nothing is taken.
    func reserve(key: String, events: Int) -> Int? {
        let now = ContinuousClock.now
        return buckets.withLock { b in
            let tokens = b[key].map { refilled($0, at: now) } ?? Double(eventsPerSecond)
            if let wait = wait(tokens) { return wait }
            b[key] = (tokens - Double(events), now)
            return nil
        }
    }

    /// Replaces a reservation of `reserved` events by the `actual` number the batch carried.
    func settle(key: String, reserved: Int, actual: Int) {
        add(Double(reserved - actual), to: key)
    }

    /// Gives back the charge of a batch that was then refused whole: nothing of it was stored,
    /// and its retry must not pay twice. The bucket still holds at most one second of the limit.
    func refund(key: String, events: Int) {
        add(Double(events), to: key)
    }

    /// The `429` for `key`, to retry after `wait` seconds.
    func refusal(key: String, wait: Int) -> APIError {
        APIError(.rateLimited, "key '\(key)' sends more than its limit of \(eventsPerSecond) events per second; nothing of this batch was stored, retry after the delay", retryAfterSeconds: wait)
    }

    /// `nil` when `tokens` hold at least one event, otherwise the whole seconds (at least 1) until they will.
    private func wait(_ tokens: Double) -> Int? {
        guard tokens < 1 else { return nil }
        return max(1, Int(((1 - tokens) / Double(eventsPerSecond)).rounded(.up)))
    }

    private func add(_ events: Double, to key: String) {
        guard events != 0 else { return }
        let now = ContinuousClock.now
        buckets.withLock { b in
            let tokens = b[key].map { refilled($0, at: now) } ?? Double(eventsPerSecond)
            b[key] = (min(Double(eventsPerSecond), tokens + events), now)
        }
    }

    /// The bucket's tokens at `now`: refilled at the rate since its last update, one second's worth at most.
    private func refilled(_ bucket: (tokens: Double, updated: ContinuousClock.Instant), at now: ContinuousClock.Instant) -> Double {
        let rate = Double(eventsPerSecond)
        return min(rate, bucket.tokens + (now - bucket.updated).seconds * rate)
    }
}

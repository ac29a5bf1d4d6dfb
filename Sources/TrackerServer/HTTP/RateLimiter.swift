import HTTPTypes
import Synchronization

/// A token bucket per key: `eventsPerSecond` sustained, one second of burst, refused at the
/// request head.
///
/// Off unless `TRACKER_RATE_LIMIT` is set. The one decision is made before the body is read:
/// a key with less than one event left gets `429` with `Retry-After` (usually on the event
/// loop, by `QuickAnswers`). A batch let through is charged for every event it carries, valid
/// or not, once its body is in and before it waits for a place or is decoded; the charge may
/// take the bucket below zero, and the key then waits until the debt is repaid. So the key
/// sends at most its limit over time, a refusal never waits behind other batches' decoding
/// (it did, seconds under overload, when it needed the batch's size), and a batch larger than
/// the bucket is not refused forever: every retry of it would have been refused too. A batch
/// then refused whole (not JSON, over a limit, the database unavailable) gets its charge back.
final class RateLimiter: Sendable {
    let eventsPerSecond: Int
    private let buckets = Mutex<[String: (tokens: Double, updated: ContinuousClock.Instant)]>([:])

    init(eventsPerSecond: Int) {
        self.eventsPerSecond = eventsPerSecond
    }

    /// The whole seconds until `key` may send again, or `nil` when it may now.
    func exhausted(key: String) -> Int? {
        buckets.withLock { b in
            guard let bucket = b[key] else { return nil }
            let tokens = refilled(bucket, at: .now)
            guard tokens < 1 else { return nil }
            return max(1, Int(((1 - tokens) / Double(eventsPerSecond)).rounded(.up)))
        }
    }

    /// Takes `events` from `key`'s bucket, into debt if it holds fewer.
    func charge(key: String, events: Int) {
        add(-Double(events), to: key)
    }

    /// Gives back the charge of a batch that was then refused whole: nothing of it was stored,
    /// and its retry must not pay twice. The bucket still holds at most one second of the limit.
    func refund(key: String, events: Int) {
        add(Double(events), to: key)
    }

    /// The `429` for `key`, to retry after `wait` seconds.
    func refusal(key: String, wait: Int) -> APIError {
        APIError(.tooManyRequests, "rate_limited", "key '\(key)' sends more than its limit of \(eventsPerSecond) events per second; nothing of this batch was stored, retry after the delay", retryAfterSeconds: wait)
    }

    private func add(_ events: Double, to key: String) {
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

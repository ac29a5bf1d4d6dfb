import Synchronization

/// A token bucket per key: `eventsPerSecond` sustained, one second of burst.
///
/// Off unless `TRACKER_RATE_LIMIT` is set; a key over its limit gets `429` with `Retry-After`.
/// A batch larger than one second of the limit is let through when the bucket is full and
/// leaves it in debt (the key then waits until the debt is repaid): refusing it would refuse
/// every retry of it too, so a client following `Retry-After` would never get through.
final class RateLimiter: Sendable {
    let eventsPerSecond: Int
    private let buckets = Mutex<[String: (tokens: Double, updated: ContinuousClock.Instant)]>([:])

    init(eventsPerSecond: Int) {
        self.eventsPerSecond = eventsPerSecond
    }

    /// The whole seconds until `key` may send one event again, or `nil` when it may now.
    ///
    /// A key whose bucket has not even one event left would be refused whatever its batch
    /// holds, so its batch is refused before it is decoded: under overload, decoding batches
    /// only to refuse them took the cores the admitted batches needed.
    func exhausted(key: String) -> Int? {
        buckets.withLock { b in
            guard let bucket = b[key] else { return nil }
            return wait(for: 1, in: refilled(bucket, at: .now))
        }
    }

    /// `nil` when the batch may go (its events are taken from the bucket), otherwise the whole
    /// seconds to wait before the same batch would be let through.
    func admit(key: String, events: Int) -> Int? {
        let now = ContinuousClock.now
        return buckets.withLock { b in
            var tokens = b[key].map { refilled($0, at: now) } ?? Double(eventsPerSecond)
            defer { b[key] = (tokens, now) }
            if let wait = wait(for: min(Double(events), Double(eventsPerSecond)), in: tokens) { return wait }
            tokens -= Double(events)
            return nil
        }
    }

    /// The bucket's tokens at `now`: refilled at the rate since its last update, one second's worth at most.
    private func refilled(_ bucket: (tokens: Double, updated: ContinuousClock.Instant), at now: ContinuousClock.Instant) -> Double {
        let rate = Double(eventsPerSecond)
        return min(rate, bucket.tokens + (now - bucket.updated).seconds * rate)
    }

    /// `nil` when `tokens` cover `needed`, otherwise the whole seconds (at least 1) until they would.
    private func wait(for needed: Double, in tokens: Double) -> Int? {
        guard tokens < needed else { return nil }
        return max(1, Int(((needed - tokens) / Double(eventsPerSecond)).rounded(.up)))
    }
}

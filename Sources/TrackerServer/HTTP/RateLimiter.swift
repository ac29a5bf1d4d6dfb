import Synchronization

/// A token bucket per key: `eventsPerSecond` sustained, one second of burst.
///
/// Off unless `TRACKER_RATE_LIMIT` is set; a key over its limit gets `429` with `Retry-After`.
final class RateLimiter: Sendable {
    let eventsPerSecond: Int
    private let buckets = Mutex<[String: (tokens: Double, updated: ContinuousClock.Instant)]>([:])

    init(eventsPerSecond: Int) {
        self.eventsPerSecond = eventsPerSecond
    }

    func allow(key: String, events: Int) -> Bool {
        let now = ContinuousClock.now
        let capacity = Double(eventsPerSecond)
        return buckets.withLock { b in
            var bucket = b[key] ?? (capacity, now)
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated).seconds * capacity)
            bucket.updated = now
            let allowed = bucket.tokens >= Double(events)
            if allowed { bucket.tokens -= Double(events) }
            b[key] = bucket
            return allowed
        }
    }
}

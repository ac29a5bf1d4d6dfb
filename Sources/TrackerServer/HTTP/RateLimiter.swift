import HTTPTypes
import Synchronization

/// A token bucket per key: `eventsPerSecond` sustained, one second of burst, refused at the
/// request head.
///
/// Off unless `TRACKER_RATE_LIMIT` is set. The one decision is made before the body is read:
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
/// `QuickAnswers`, which hands the reservation to the route in a request header
/// (`headReservation`). They are made together so that the next head of the key already sees
/// the events taken: a head let through is never refused later by the route, after waiting for
/// a task, and a refusal never waits behind other batches' decoding.
final class RateLimiter: Sendable {
    let eventsPerSecond: Int
    private let buckets = Mutex<[String: (tokens: Double, updated: ContinuousClock.Instant)]>([:])
    /// Makes `headReservationField` unforgeable: a client's own header of that name, whose
    /// value cannot start with this process's secret, reserves nothing.
    private let secret: String

    init(eventsPerSecond: Int) {
        self.eventsPerSecond = eventsPerSecond
        var generator = SystemRandomNumberGenerator()
        secret = (0..<2).map { _ in
            let hex = String(generator.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    /// The request header in which `QuickAnswers` tells the route what it reserved at the head.
    static let headReservationField = HTTPField.Name("Tracker-Head-Reservation")!

    /// `headReservationField`'s value for `events` reserved for `key` (a key name has no space).
    func headReservation(key: String, events: Int) -> String {
        "\(secret) \(events) \(key)"
    }

    /// The reservation made at the head of the request with `fields`, or `nil` when none was
    /// (the header is missing, or was not written by this limiter).
    func headReservation(in fields: HTTPFields) -> (key: String, events: Int)? {
        guard let value = fields[Self.headReservationField] else { return nil }
        let parts = value.split(separator: " ", maxSplits: 2)
        guard parts.count == 3, Self.sameBytes(parts[0], secret), let events = Int(parts[1]), events >= 0 else { return nil }
        return (String(parts[2]), events)
    }

    /// Whether `a` and `b` are the same bytes, in a time that does not tell where they differ.
    private static func sameBytes(_ a: Substring, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        return zip(a.utf8, b.utf8).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
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

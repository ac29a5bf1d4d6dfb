import Testing
@testable import TrackerServer

/// The per-key token bucket: a key with nothing left is refused before its batch is decoded.
struct RateLimiterTests {
    @Test func aKeyWithTokensLeftIsNotExhausted() {
        let limiter = RateLimiter(eventsPerSecond: 100)
        #expect(limiter.exhausted(key: "new") == nil, "a key never seen has a full bucket")
        #expect(limiter.admit(key: "app", events: 60) == nil)
        #expect(limiter.exhausted(key: "app") == nil, "40 events are left")
    }

    @Test func aKeyInDebtIsExhaustedUntilItCouldSendOneEvent() {
        let limiter = RateLimiter(eventsPerSecond: 10)
        // A batch larger than a second of the limit goes through a full bucket and leaves debt.
        #expect(limiter.admit(key: "app", events: 50) == nil)
        let wait = limiter.exhausted(key: "app")
        #expect(wait != nil && wait! >= 4, "40 events of debt at 10/s: about 4 s, got \(String(describing: wait))")
        #expect(limiter.exhausted(key: "other") == nil, "one key's debt is not another's")
        #expect(limiter.admit(key: "app", events: 1) != nil, "and admit agrees")
    }
}

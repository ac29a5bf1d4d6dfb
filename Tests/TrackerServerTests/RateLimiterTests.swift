import Testing
@testable import TrackerServer

/// The per-key token bucket: refused only while a key has less than one event left; a batch
/// let through is charged whole, into debt if need be.
struct RateLimiterTests {
    @Test func aKeyWithTokensLeftIsNotExhausted() {
        let limiter = RateLimiter(eventsPerSecond: 100)
        #expect(limiter.exhausted(key: "new") == nil, "a key never seen has a full bucket")
        limiter.charge(key: "app", events: 60)
        #expect(limiter.exhausted(key: "app") == nil, "40 events are left")
        limiter.charge(key: "app", events: 40)
        #expect(limiter.exhausted(key: "app") == 1, "nothing left: one event comes back within a second")
    }

    @Test func aKeyInDebtWaitsUntilTheDebtIsRepaid() {
        let limiter = RateLimiter(eventsPerSecond: 10)
        limiter.charge(key: "app", events: 50)
        let wait = limiter.exhausted(key: "app")
        #expect(wait != nil && wait! >= 4, "40 events of debt at 10/s: about 4 s, got \(String(describing: wait))")
        #expect(limiter.exhausted(key: "other") == nil, "one key's debt is not another's")
    }

    @Test func aRefundGivesBackTheChargeUpToOneSecondOfTheLimit() {
        let limiter = RateLimiter(eventsPerSecond: 10)
        limiter.charge(key: "app", events: 30)
        #expect(limiter.exhausted(key: "app") != nil)
        limiter.refund(key: "app", events: 30)
        #expect(limiter.exhausted(key: "app") == nil, "the refund repaid the debt")
        limiter.refund(key: "app", events: 50)
        limiter.charge(key: "app", events: 10)
        #expect(limiter.exhausted(key: "app") != nil, "a refund never raises the bucket past one second of the limit")
    }
}

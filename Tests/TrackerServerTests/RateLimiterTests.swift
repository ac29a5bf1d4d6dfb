import HTTPTypes
import Testing
import Tracker
@testable import TrackerServer

/// The per-key token bucket: refused only while a key has less than one event left; a request
/// let through reserves its events, into debt if need be, and settles them once decoded. Rates
/// of a few events per second keep the milliseconds between two calls out of the results.
struct RateLimiterTests {
    /// The whole seconds `key` must wait before it may send, `nil` when it may now (a
    /// reservation of nothing takes nothing).
    func waitOf(_ limiter: RateLimiter, _ key: String) -> Int? {
        limiter.reserve(key: key, events: 0)
    }

    @Test func aKeyIsRefusedOnlyOnceItHasLessThanOneEventLeft() {
        let limiter = RateLimiter(eventsPerSecond: 3)
        #expect(waitOf(limiter, "new") == nil, "a key never seen has a full bucket")
        #expect(limiter.reserve(key: "app", events: 2) == nil)
        #expect(waitOf(limiter, "app") == nil, "one event is left")
        #expect(limiter.reserve(key: "app", events: 1) == nil)
        #expect(limiter.reserve(key: "app", events: 1) == 1, "nothing left: one event comes back within a second")
        #expect(waitOf(limiter, "other") == nil, "one key's use is not another's")
    }

    @Test func aReservationLargerThanTheBucketLeavesDebtThatIsWaitedOut() {
        let limiter = RateLimiter(eventsPerSecond: 2)
        #expect(limiter.reserve(key: "app", events: 20) == nil, "a full bucket lets a batch larger than itself through")
        let wait = waitOf(limiter, "app")
        #expect(wait != nil && (9...10).contains(wait!), "18 events of debt at 2/s: 9.5 s, got \(String(describing: wait))")
    }

    @Test func settlingReplacesTheReservationByWhatTheBatchCarried() {
        let limiter = RateLimiter(eventsPerSecond: 2)
        #expect(limiter.reserve(key: "app", events: 500) == nil)
        #expect(waitOf(limiter, "app") != nil, "in flight, the reservation holds the key back")
        limiter.settle(key: "app", reserved: 500, actual: 1)
        #expect(waitOf(limiter, "app") == nil, "the batch carried 1 event: 1 is left")
    }

    @Test func aRefundGivesBackTheChargeUpToOneSecondOfTheLimit() {
        let limiter = RateLimiter(eventsPerSecond: 2)
        #expect(limiter.reserve(key: "app", events: 30) == nil)
        limiter.refund(key: "app", events: 30)
        #expect(waitOf(limiter, "app") == nil, "the refund repaid the debt")
        limiter.refund(key: "app", events: 50)
        #expect(limiter.reserve(key: "app", events: 2) == nil)
        #expect(waitOf(limiter, "app") != nil, "a refund never raises the bucket past one second of the limit")
    }

    @Test func theReservationIsAnUpperBoundOfTheEventsABodyCanCarry() {
        func route(_ length: Int?, _ gzip: Bool) -> Int {
            IngestRoute.estimatedEvents(length: length, gzip: gzip, limits: IngestLimits())
        }
        #expect(route(147, false) == 1, "the smallest valid event is about 147 bytes")
        #expect(route(256_000, false) == 500, "at most a batch's limit")
        #expect(route(nil, false) == 500, "a body of undeclared length may carry a whole batch")
        #expect(route(1_600, true) == 100, "16 bytes an event gzipped")
    }
}

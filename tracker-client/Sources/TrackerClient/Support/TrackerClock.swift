#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// The two clocks the client reads: the device's wall clock, which stamps `occurredAt` and
/// `sentAt`, and a monotonic clock for waiting (flush timer, backoff).
///
/// Injected so that the tests drive time by hand instead of sleeping.
protocol TrackerClock: Sendable {
    /// Microseconds since 1970-01-01 UTC on the device's clock.
    func wallMicros() -> Int64
    /// Time since an arbitrary fixed start; never goes back.
    func monotonic() -> Duration
    /// Returns once `monotonic()` has reached `deadline`; throws when the task is cancelled.
    func sleep(until deadline: Duration) async throws
}

/// The system's clocks.
struct SystemClock: TrackerClock {
    private let start = ContinuousClock.now

    func wallMicros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1_000
    }

    func monotonic() -> Duration {
        ContinuousClock.now - start
    }

    func sleep(until deadline: Duration) async throws {
        try await ContinuousClock().sleep(until: start + deadline)
    }
}

import Synchronization

/// Time as a test sets it: instants are offsets from an arbitrary zero, and nothing moves
/// unless the test advances it, so deadlines are checked to the microsecond without waiting.
struct TestInstant: InstantProtocol {
    var offset: Duration

    static let zero = TestInstant(offset: .zero)

    func advanced(by duration: Duration) -> TestInstant { TestInstant(offset: offset + duration) }
    func duration(to other: TestInstant) -> Duration { other.offset - offset }
    static func < (a: TestInstant, b: TestInstant) -> Bool { a.offset < b.offset }
}

/// A clock the test advances by hand. A task asleep on it (a service's timer) wakes when the
/// test moves time to its deadline, and a cancelled sleeper at once.
final class ManualClock: Clock, Sendable {
    private struct Sleeper {
        var id: Int
        var deadline: TestInstant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private let state = Mutex<(now: TestInstant, sleepers: [Sleeper], nextID: Int)>((.zero, [], 0))

    var now: TestInstant { state.withLock { $0.now } }
    var minimumResolution: Duration { .zero }

    /// Tasks asleep on the clock.
    var sleepers: Int { state.withLock { $0.sleepers.count } }

    func advance(by duration: Duration) {
        let due = state.withLock { s in
            s.now = s.now.advanced(by: duration)
            let now = s.now
            defer { s.sleepers.removeAll { $0.deadline <= now } }
            return s.sleepers.filter { $0.deadline <= now }
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    func sleep(until deadline: TestInstant, tolerance: Duration?) async throws {
        let id = state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Start { case due, cancelled, asleep }
                let start = state.withLock { s -> Start in
                    if deadline <= s.now { return .due }
                    if Task.isCancelled { return .cancelled }
                    s.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return .asleep
                }
                switch start {
                case .due: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .asleep: break
                }
            }
        } onCancel: {
            let sleeper = state.withLock { s -> Sleeper? in
                guard let i = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: i)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Waits (10 s at most, in real time) until `count` tasks sleep on the clock: a test moves
    /// time only once the timers it means to fire are set.
    func waitForSleepers(_ count: Int) async {
        let giveUp = ContinuousClock.now + .seconds(10)
        while sleepers < count, ContinuousClock.now < giveUp {
            try? await Task.sleep(for: .milliseconds(1))
        }
    }
}

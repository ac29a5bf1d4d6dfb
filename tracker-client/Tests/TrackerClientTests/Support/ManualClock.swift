import Foundation
@testable import TrackerClient

/// A clock that moves only when the test says so. `nextSleep()` tells the test when the
/// delivery task has gone to sleep and until when, so tests never sleep themselves.
final class ManualClock: TrackerClock {
    private struct Sleeper {
        var id: Int
        var deadline: Duration
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Duration = .zero
        var wall: Int64
        var nextID = 0
        var sleepers: [Sleeper] = []
        var watchers: [CheckedContinuation<Duration, Never>] = []
    }

    private let state: Locked<State>

    /// Starts at 2026-11-20T10:00:00Z on the wall clock.
    init(wallMicros: Int64 = 1_795_168_800_000_000) {
        state = Locked(State(wall: wallMicros))
    }

    func wallMicros() -> Int64 { state.withLock { $0.wall } }
    func monotonic() -> Duration { state.withLock { $0.now } }

    func sleep(until deadline: Duration) async throws {
        let id = state.withLock { s in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Action { case resume, cancel, wait([CheckedContinuation<Duration, Never>]) }
                let action = state.withLock { s -> Action in
                    if Task.isCancelled { return .cancel }
                    if deadline <= s.now { return .resume }
                    s.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    defer { s.watchers = [] }
                    return .wait(s.watchers)
                }
                switch action {
                case .resume: continuation.resume()
                case .cancel: continuation.resume(throwing: CancellationError())
                case .wait(let watchers): for w in watchers { w.resume(returning: deadline) }
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

    /// Moves both clocks forward and wakes every sleeper whose deadline has come.
    func advance(by duration: Duration) {
        let due = state.withLock { s -> [Sleeper] in
            s.now += duration
            s.wall += duration.micros
            let due = s.sleepers.filter { $0.deadline <= s.now }
            s.sleepers.removeAll { $0.deadline <= s.now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Moves only the wall clock (the user changed the time, NTP corrected it).
    func setWall(byAdding duration: Duration) {
        state.withLock { $0.wall += duration.micros }
    }

    /// The earliest deadline anyone sleeps until, waiting for a sleeper when there is none.
    func nextSleep() async -> Duration {
        await withCheckedContinuation { continuation in
            let existing = state.withLock { s -> Duration? in
                if let earliest = s.sleepers.map(\.deadline).min() { return earliest }
                s.watchers.append(continuation)
                return nil
            }
            if let existing { continuation.resume(returning: existing) }
        }
    }

    /// The deadlines of the current sleepers.
    var sleepers: [Duration] { state.withLock { $0.sleepers.map(\.deadline).sorted() } }
}

import Synchronization
import Tracker

// The ingest front door's shared ceilings: every connection's `QuickAnswers` refuses a batch
// at its head when the admission places are all taken, and the ingest route takes a place per
// batch and holds body bytes against the budget while they arrive.

/// Bytes held by request bodies that are still arriving, with a ceiling.
final class BodyBudget: Sendable {
    let limitBytes: Int
    private let held = Atomic<Int>(0)

    init(limitBytes: Int) {
        self.limitBytes = limitBytes
    }

    /// Takes `bytes`, or returns false (taking nothing) when they would pass the ceiling.
    func take(_ bytes: Int) -> Bool {
        if held.add(bytes, ordering: .relaxed).newValue <= limitBytes { return true }
        held.subtract(bytes, ordering: .relaxed)
        return false
    }

    func release(_ bytes: Int) {
        held.subtract(bytes, ordering: .relaxed)
    }
}

/// A counter of requests in progress with a ceiling.
final class Admission: Sendable {
    let limit: Int
    private let inProgress = Atomic<Int>(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes a place, or returns false when all `limit` places are taken.
    func enter() -> Bool {
        if inProgress.add(1, ordering: .relaxed).newValue <= limit { return true }
        inProgress.subtract(1, ordering: .relaxed)
        return false
    }

    func leave() {
        inProgress.subtract(1, ordering: .relaxed)
    }

    /// Every place is taken now (`QuickAnswers` refuses a batch's head then, on the event loop).
    var isFull: Bool { inProgress.load(ordering: .relaxed) >= limit }

    /// The refusal of a batch when every place is taken, wherever it is refused.
    var refusal: APIError {
        APIError(.overloaded, "the tracker is handling \(limit) batches at once; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 1)
    }
}

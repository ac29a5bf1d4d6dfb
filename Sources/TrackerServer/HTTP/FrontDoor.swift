import NIOCore
import Synchronization
import Tracker

/// What `QuickAnswers` decided at a batch's head, on the event loop, and the ingest route acts
/// on without deciding again: the key it authenticated from the key table in memory, what the
/// head says of the body, and the events it reserved against the key's rate limit.
struct AdmittedBatch: Sendable {
    var principal: Principal
    var head: IngestRoute.BatchHead
    /// The events reserved for `principal`'s key (`nil` without a rate limit).
    var reserved: Int?
}

/// A request context that carries its `AdmittedBatch`, when the front door made one.
protocol AdmittedBatchRequestContext {
    var admittedBatch: AdmittedBatch? { get }
}

/// The decisions of each connection's `QuickAnswers`, one per request it passed on (`nil` for a
/// request it left to the routes), taken in the same order by the requests' contexts.
///
/// A connection's requests reach the router one at a time and in the order they arrived, and
/// each makes exactly one context (`TrackerRequestContext.init(source:)`), so the first
/// decision a connection's queue holds is the one of the request whose context is being made.
/// The queue is a few entries long at most (pipelined requests), and goes with the connection.
final class FrontDoorDecisions: Sendable {
    static let shared = FrontDoorDecisions()

    private let queues = Mutex<[ObjectIdentifier: [AdmittedBatch?]]>([:])

    /// Queues the decision for the request `channel` passes on now.
    func pass(_ decision: AdmittedBatch?, on channel: any Channel) {
        queues.withLock { $0[ObjectIdentifier(channel), default: []].append(decision) }
    }

    /// The decision for the request whose context `channel` makes now: `nil` when there is none
    /// (the request was left to the route, or came through no `QuickAnswers`, as in tests that
    /// drive the router directly).
    func take(for channel: any Channel) -> AdmittedBatch? {
        queues.withLock { queues in
            let id = ObjectIdentifier(channel)
            guard var queue = queues[id], !queue.isEmpty else { return nil }
            let first = queue.removeFirst()
            queues[id] = queue.isEmpty ? nil : queue
            return first
        }
    }

    /// Forgets `channel`'s queue as the connection goes, returning the batches whose requests
    /// never reached a route (their reservations are given back).
    func close(_ channel: any Channel) -> [AdmittedBatch] {
        queues.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) ?? [] }.compactMap { $0 }
    }
}

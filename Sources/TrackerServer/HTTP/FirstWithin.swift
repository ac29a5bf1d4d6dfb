import Synchronization

/// The value of `operation` if it finishes within `limit`, else `nil` while it goes on
/// (an event log append cannot be taken back once queued, nor needs to be).
func firstWithin<T: Sendable>(_ limit: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    let first = FirstAnswer<T>()
    return await withCheckedContinuation { continuation in
        first.set(continuation)
        Task { first.resume(with: await operation()) }
        Task {
            try? await Task.sleep(for: limit)
            first.resume(with: nil)
        }
    }
}

/// A continuation resumed by whichever answer comes first; later ones are dropped.
private final class FirstAnswer<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T?, Never>?>(nil)

    func set(_ c: CheckedContinuation<T?, Never>) {
        continuation.withLock { $0 = c }
    }

    func resume(with value: T?) {
        continuation.withLock { c in
            defer { c = nil }
            return c
        }?.resume(returning: value)
    }
}

import Synchronization

/// Runs `service` beside `body`, then cancels it (as a service group cancels its services) and
/// waits for it to end: nothing a test starts outlives the test.
func whileRunning<T: Sendable>(_ service: @escaping @Sendable () async throws -> Void,
                               _ body: () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await service() }
        do {
            let value = try await body()
            group.cancelAll()
            try await group.waitForAll()
            return value
        } catch {
            group.cancelAll()
            throw error
        }
    }
}

/// A one-shot signal a test raises, and errands or loads wait for (cancellation does not end
/// the wait: it stands for work that does not heed it, such as an append or a query).
final class Gate: Sendable {
    private let state = Mutex<(isOpen: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func open() {
        let waiters = state.withLock { s in
            s.isOpen = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let isOpen = state.withLock { s in
                if !s.isOpen { s.waiters.append(waiter) }
                return s.isOpen
            }
            if isOpen { waiter.resume() }
        }
    }
}

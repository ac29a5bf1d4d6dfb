import ServiceLifecycle

/// Runs `services` in a service group beside `body`, then shuts the group down gracefully and
/// waits for it: what a service keeps in `run()` (a pool's deadlines, the key table's loads)
/// works in `body`, and nothing of it outlives the test.
func withServices<T: Sendable>(_ services: [any Service], _ body: () async throws -> T) async throws -> T {
    let group = ServiceGroup(configuration: .init(services: services, logger: TestEnvironment.logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let value = try await body()
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return value
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
    }
}

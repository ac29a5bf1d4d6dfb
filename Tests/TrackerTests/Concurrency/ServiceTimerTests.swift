import Synchronization
import Testing
@testable import Tracker
import TrackerPostgres

/// The timers and the work a service hands to its own `run()`, and the two services built on
/// them without a database (`Errands`, the key cache), driven by a clock the test advances.
struct ServiceTimerTests {
    @Test func aTimerFiresWhenTheClockReachesItsDeadlineAndNotBefore() async throws {
        let clock = ManualClock()
        let tasks = ServiceTasks()
        let fired = Count()
        try await whileRunning({ await tasks.run() }) {
            tasks.schedule(at: TestInstant.zero.advanced(by: .seconds(5)), on: clock) { fired.add() }
            await clock.waitForSleepers(1)
            clock.advance(by: .seconds(5) - .microseconds(1))
            try await Task.sleep(for: .milliseconds(20))
            #expect(fired.value == 0, "a microsecond early")
            clock.advance(by: .microseconds(1))
            for _ in 0..<1_000 where fired.value == 0 { try await Task.sleep(for: .milliseconds(10)) }
            #expect(fired.value == 1)
        }
    }

    @Test func workAddedBeforeRunBeginsWaitsForItAndRunEndsItsTimersWhenFinished() async throws {
        let clock = ManualClock()
        let tasks = ServiceTasks()
        let ran = Gate()
        tasks.add { ran.open() }
        tasks.schedule(at: TestInstant.zero.advanced(by: .seconds(60)), on: clock) { Issue.record("a finished run() fires nothing") }
        let running = Task { await tasks.run() }
        await ran.wait()
        await clock.waitForSleepers(1)
        tasks.finish()
        await running.value
        #expect(clock.sleepers == 0, "the timer ended with run()")
        clock.advance(by: .seconds(60))
    }

    @Test func anErrandThatEndsInTimeGivesItsValue() async throws {
        let errands = Errands(clock: ManualClock())
        let value = try await whileRunning({ try await errands.run() }) {
            await errands.firstWithin(.seconds(2)) { 42 }
        }
        #expect(value == 42)
    }

    @Test func pastItsLimitTheCallerGetsNothingWhileTheErrandGoesOnToItsEnd() async throws {
        let clock = ManualClock()
        let errands = Errands(clock: clock)
        let release = Gate()
        let ended = Gate()
        try await whileRunning({ try await errands.run() }) {
            let caller = Task {
                await errands.firstWithin(.seconds(2)) {
                    await release.wait()
                    ended.open()
                    return "stored"
                }
            }
            await clock.waitForSleepers(1)
            clock.advance(by: .seconds(2))
            #expect(await caller.value == nil, "the caller stops waiting at its deadline")
            release.open()
            await ended.wait()
        }
    }

    @Test func runEndsOnlyOnceItsErrandsHaveEndedAndThenErrandsRunInPlace() async throws {
        let errands = Errands(clock: ManualClock())
        let release = Gate()
        let started = Gate()
        let running = Task { try await errands.run() }
        let caller = Task {
            await errands.firstWithin(.seconds(2)) {
                started.open()
                await release.wait()
                return 1
            }
        }
        await started.wait()
        running.cancel()
        try await Task.sleep(for: .milliseconds(50))
        release.open()
        try await running.value
        #expect(await caller.value == 1, "the errand ran to its end, and answered its caller")
        #expect(await errands.firstWithin(.seconds(2)) { 2 } == 2, "after run() an errand runs in its caller's task")
    }

    // MARK: The key cache

    static let app = KeyDigest(key: "trk_app")

    /// The key table, read in memory, counting its reads.
    final class Table: Sendable {
        let reads = Count()
        let keys = Mutex<[KeyDigest: Principal]>([ServiceTimerTests.app: Principal(name: "app", scope: .ingest)])

        func read() async throws -> [KeyDigest: Principal] {
            reads.add()
            return keys.withLock { $0 }
        }
    }

    @Test func theKeyCacheLoadsWhenItStartsAndAnswersFromMemoryWithoutAnotherRead() async throws {
        let clock = ManualClock()
        let table = Table()
        let cache = KeyCache(cacheTTL: .seconds(5), minReloadInterval: .milliseconds(250), clock: clock, readTable: table.read)
        #expect(cache.cachedPrincipal(Self.app) == nil, "nothing is loaded before the cache runs")
        try await whileRunning({ await cache.run() }) {
            for _ in 0..<1_000 where cache.cachedPrincipal(Self.app) == nil { try await Task.sleep(for: .milliseconds(10)) }
            #expect(cache.cachedPrincipal(Self.app)?.name == "app", "loaded at start, before anyone asked")
            #expect(try await cache.principal(Self.app)?.name == "app")
            #expect(table.reads.value == 1)
        }
    }

    @Test func unknownKeysShareOneReadTheTimerAllowsAndAStoppedCacheFailsItsCallers() async throws {
        let clock = ManualClock()
        let table = Table()
        let cache = KeyCache(cacheTTL: .seconds(5), minReloadInterval: .milliseconds(250), clock: clock, readTable: table.read)
        let running = Task { await cache.run() }
        for _ in 0..<1_000 where cache.cachedPrincipal(Self.app) == nil { try await Task.sleep(for: .milliseconds(10)) }
        clock.advance(by: .milliseconds(100))
        let new = KeyDigest(key: "trk_new")
        table.keys.withLock { $0[new] = Principal(name: "new", scope: .report) }
        let callers = (0..<20).map { n in
            Task { try await cache.principal(n == 0 ? new : KeyDigest(key: "trk_guess\(n)"))?.name }
        }
        await clock.waitForSleepers(1)
        #expect(table.reads.value == 1, "within 250 ms of the first read, none begins")
        clock.advance(by: .milliseconds(150))
        #expect(try await callers[0].value == "new", "a key created elsewhere works after one read")
        for caller in callers.dropFirst() { #expect(try await caller.value == nil) }
        #expect(table.reads.value == 2, "twenty unknown keys, one read")

        running.cancel()
        await running.value
        await #expect(throws: CancellationError.self) { try await cache.principal(KeyDigest(key: "trk_after")) }
    }
}

/// How many times something happened, across tasks.
final class Count: Sendable {
    private let count = Atomic<Int>(0)

    var value: Int { count.load(ordering: .sequentiallyConsistent) }
    func add() { count.add(1, ordering: .sequentiallyConsistent) }
}

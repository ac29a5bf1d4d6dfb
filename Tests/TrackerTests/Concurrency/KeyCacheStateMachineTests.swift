import Testing
@testable import Tracker

/// The key cache's decisions: keys are names, waiting callers are names, loads are begun and
/// ended by the test, and time moves only when the test says.
struct KeyCacheStateMachineTests {
    typealias Machine = KeyCacheStateMachine<ManualClock, String>

    static let app = KeyDigest(key: "trk_app")
    static let other = KeyDigest(key: "trk_other")
    static let guess = KeyDigest(key: "trk_guess")
    static let table: Machine.Keys = [app: Principal(name: "app", scope: .ingest), other: Principal(name: "other", scope: .report)]

    static func machine(_ clock: ManualClock) -> Machine {
        Machine(cacheTTL: .seconds(5), minReloadInterval: .milliseconds(250), clock: clock)
    }

    /// A cache whose first load (at start, at zero) has ended with `table`.
    static func loaded(_ clock: ManualClock) -> Machine {
        var cache = machine(clock)
        #expect(cache.started() == .load(began: .zero), "the table is loaded when the cache starts")
        #expect(cache.loaded(.success(table), began: .zero).then == .none)
        return cache
    }

    static func name(_ lookup: Machine.Lookup) -> String? {
        if case .answer(let principal, _) = lookup { return principal.name }
        return nil
    }

    @Test func aKeyInATableYoungerThanTheTTLIsAnsweredWithoutALoad() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .seconds(5) - .microseconds(1))
        guard case .answer(let principal, .none) = cache.lookup(Self.app) else { Issue.record("answered from memory"); return }
        #expect(principal.name == "app")
        #expect(cache.answerWithoutWaiting(Self.other)?.principal.name == "other")
    }

    @Test func pastTheTTLAKeyIsStillAnsweredWhileOneLoadBegins() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .seconds(5))
        guard case .answer(_, .load(let began)) = cache.lookup(Self.app) else { Issue.record("answered, and a load begins"); return }
        #expect(began == clock.now)
        guard case .answer(_, .none) = cache.lookup(Self.other) else { Issue.record("answered; the load under way serves it too"); return }
        #expect(cache.answerWithoutWaiting(Self.app)?.then == Machine.Next.none)
        _ = cache.loaded(.success([Self.other: Principal(name: "other", scope: .report)]), began: began)
        #expect(Self.name(cache.lookup(Self.other)) == "other")
        guard case .mustWait = cache.lookup(Self.app) else { Issue.record("a key revoked elsewhere is gone after the load"); return }
    }

    @Test func pastTwiceTheTTLEveryKeyWaitsForALoad() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .seconds(10))
        guard case .mustWait(let since) = cache.lookup(Self.app) else { Issue.record("the table is too old to answer"); return }
        #expect(since == clock.now)
        #expect(cache.answerWithoutWaiting(Self.app) == nil, "nor is it answered without waiting")
    }

    @Test func anUnknownKeyWaitsForALoadThatBeganAfterItAsked() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .seconds(6))
        guard case .answer(_, .load(let refresh)) = cache.lookup(Self.app) else { Issue.record("a refresh begins"); return }
        clock.advance(by: .milliseconds(10))
        guard case .mustWait(let since) = cache.lookup(Self.guess) else { Issue.record("an unknown key waits"); return }
        guard case .waiting(.none) = cache.wait("guesser", since: since) else { Issue.record("it waits; a load is under way"); return }
        let first = cache.loaded(.success(Self.table), began: refresh)
        #expect(first.answered.isEmpty, "the load under way began before the key was asked for")
        guard case .scheduleTimer(let allowed) = first.then else { Issue.record("the next load waits for the spacing"); return }
        #expect(allowed == refresh.advanced(by: .milliseconds(250)))
        clock.advance(by: .milliseconds(240))
        guard case .load(let next) = cache.timerFired() else { Issue.record("the timer begins the load"); return }
        #expect(cache.loaded(.success(Self.table), began: next) == (["guesser"], .none))
    }

    @Test func aFloodOfUnknownKeysSharesOneLoadAndLoadsAreSpacedByTheMinimumInterval() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .milliseconds(100))
        for n in 0..<50 {
            guard case .mustWait(let since) = cache.lookup(KeyDigest(key: "trk_guess\(n)")) else { Issue.record("unknown"); return }
            switch cache.wait("g\(n)", since: since) {
            case .waiting(.scheduleTimer(let at)):
                #expect(n == 0 && at == TestInstant.zero.advanced(by: .milliseconds(250)), "the first waiter sets the timer")
            case .waiting(.none): #expect(n > 0, "the others wait with it")
            default: Issue.record("g\(n) waits")
            }
        }
        clock.advance(by: .milliseconds(150))
        guard case .load(let began) = cache.timerFired() else { Issue.record("one load for all"); return }
        #expect(began == TestInstant.zero.advanced(by: .milliseconds(250)), "250 ms after the load before it")
        let ended = cache.loaded(.success(Self.table), began: began)
        #expect(ended.answered.count == 50)
        #expect(ended.then == .none)
    }

    @Test func aFailedLoadFailsItsWaitersAndIsNotRetriedUntilSomeoneAsks() {
        let clock = ManualClock()
        var cache = Self.machine(clock)
        guard case .load(let began) = cache.started() else { Issue.record("the first load"); return }
        guard case .mustWait(let since) = cache.lookup(Self.app) else { Issue.record("nothing loaded yet"); return }
        guard case .waiting(.none) = cache.wait("early", since: since) else { Issue.record("waits for the load under way"); return }
        struct Down: Error {}
        let failed = cache.loaded(.failure(Down()), began: began)
        #expect(failed.answered == ["early"], "the waiter gets the load's error")
        #expect(failed.then == .none, "nobody asks: nothing is retried")
        clock.advance(by: .seconds(1))
        guard case .mustWait(let later) = cache.lookup(Self.app), case .waiting(.load) = cache.wait("later", since: later) else {
            Issue.record("the next caller begins a load"); return
        }
    }

    @Test func aLoadThatBeganBeforeARevocationHereDoesNotBringTheKeyBack() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .seconds(6))
        guard case .answer(_, .load(let began)) = cache.lookup(Self.app) else { Issue.record("a refresh begins"); return }
        clock.advance(by: .milliseconds(1))
        cache.revoked()
        _ = cache.loaded(.success(Self.table), began: began)
        guard case .mustWait(let since) = cache.lookup(Self.app) else { Issue.record("the revoked key is not answered"); return }
        guard case .waiting = cache.wait("after", since: since) else {
            Issue.record("the empty table a revocation leaves answers nobody: the caller waits for a load"); return
        }
    }

    @Test func aStoppedCacheFailsItsWaitersAndLoadsNothingMore() {
        let clock = ManualClock()
        var cache = Self.loaded(clock)
        clock.advance(by: .milliseconds(1))
        guard case .mustWait(let since) = cache.lookup(Self.guess), case .waiting = cache.wait("waiting", since: since) else {
            Issue.record("the guess waits"); return
        }
        #expect(cache.stop() == ["waiting"])
        guard case .stopped = cache.wait("late", since: clock.now) else { Issue.record("nobody would load for it"); return }
        clock.advance(by: .seconds(6))
        guard case .answer(_, .none) = cache.lookup(Self.app) else { Issue.record("the table still answers, and no load begins"); return }
    }
}

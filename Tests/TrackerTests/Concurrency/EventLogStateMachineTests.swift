import Testing
@testable import Tracker

/// The event log's decisions: requests and writers are plain names, events are counts, and
/// time moves only when the test says.
struct EventLogStateMachineTests {
    typealias Machine = EventLogStateMachine<ManualClock, String, String>

    static func machine(maxGroupEvents: Int = 100, parallelWriteThreshold: Int = 50, maxQueuedEvents: Int = 1_000,
                        appendTimeout: Duration? = .seconds(8), clock: ManualClock = ManualClock()) -> Machine {
        var limits = EventLog.Configuration()
        limits.maxGroupEvents = maxGroupEvents
        limits.parallelWriteThreshold = parallelWriteThreshold
        limits.maxQueuedEvents = maxQueuedEvents
        limits.appendTimeout = appendTimeout
        return Machine(limits, clock: clock)
    }

    /// Submits and returns the id, failing the test on a refusal.
    static func submit(_ log: inout Machine, _ request: String, events: Int,
                       sourceLocation: SourceLocation = #_sourceLocation) -> (id: Int, started: (writer: String, group: [String])?) {
        submitSettingTimer(&log, request, events: events, sourceLocation: sourceLocation).submitted
    }

    /// Submits, and returns also the instant the machine set its timer for, if it did.
    static func submitSettingTimer(_ log: inout Machine, _ request: String, events: Int, sourceLocation: SourceLocation = #_sourceLocation)
        -> (submitted: (id: Int, started: (writer: String, group: [String])?), timer: TestInstant?) {
        switch log.submit(request, events: events) {
        case .accepted(let id, let start, let timer): return ((id, start.map { ($0.writer, $0.group.map(\.request)) }), timer)
        case .refused(let error):
            Issue.record("\(request) refused: \(error)", sourceLocation: sourceLocation)
            return ((-1, nil), nil)
        }
    }

    static func requests(_ action: Machine.WriterAction) -> [String]? {
        if case .write(let group) = action { return group.map(\.request) }
        return nil
    }

    @Test func anIdleWriterWritesTheFirstRequestAtOnce() {
        var log = Self.machine()
        guard case .park = log.writerReady("w1", afterWrite: false) else { Issue.record("an empty log parks its writer"); return }
        let first = Self.submit(&log, "a", events: 1)
        #expect(first.started?.writer == "w1")
        #expect(first.started?.group == ["a"], "no timer: the first request is written at once")
        #expect(log.queuedEvents == 0)
    }

    @Test func requestsArrivingDuringAWriteShareTheNextCommit() {
        var log = Self.machine()
        _ = log.writerReady("w1", afterWrite: false)
        _ = log.writerReady("w2", afterWrite: false)
        _ = Self.submit(&log, "a", events: 1)   // w2 (the last parked) writes it
        for r in ["b", "c", "d"] {
            #expect(Self.submit(&log, r, events: 1).started == nil, "below the threshold, w1 stays parked while a write runs")
        }
        #expect(log.queuedEvents == 3)
        #expect(Self.requests(log.writerReady("w2", afterWrite: true)) == ["b", "c", "d"], "one group, one commit")
    }

    @Test func aSecondWriterStartsOnlyWhenTheThresholdIsQueued() {
        var log = Self.machine(parallelWriteThreshold: 50)
        _ = log.writerReady("w1", afterWrite: false)
        _ = log.writerReady("w2", afterWrite: false)
        _ = Self.submit(&log, "first", events: 10)
        #expect(Self.submit(&log, "small", events: 39).started == nil)
        let big = Self.submit(&log, "big", events: 11)
        #expect(big.started?.writer == "w1", "50 events wait: a parallel write starts")
        #expect(big.started?.group == ["small", "big"])
    }

    @Test func aGroupHoldsAtMostMaxGroupEventsButAlwaysOneRequest() {
        var log = Self.machine(maxGroupEvents: 100, parallelWriteThreshold: 10_000)
        _ = Self.submit(&log, "a", events: 60)
        _ = Self.submit(&log, "b", events: 30)
        _ = Self.submit(&log, "c", events: 20)
        _ = Self.submit(&log, "huge", events: 500)
        #expect(Self.requests(log.writerReady("w", afterWrite: false)) == ["a", "b"])
        #expect(Self.requests(log.writerReady("w", afterWrite: true)) == ["c"])
        #expect(Self.requests(log.writerReady("w", afterWrite: true)) == ["huge"], "a request larger than a group is written alone")
    }

    @Test func beyondTheQueueLimitARequestIsRefusedAsOverloadedAndNothingOfItIsQueued() {
        var log = Self.machine(maxQueuedEvents: 100)
        _ = Self.submit(&log, "a", events: 90)
        guard case .refused(.overloaded) = log.submit("b", events: 11) else { Issue.record("b is refused"); return }
        #expect(log.queuedEvents == 90)
        _ = Self.submit(&log, "c", events: 10)
        #expect(log.queuedEvents == 100, "exactly the limit is accepted")
    }

    @Test func aQueuedRequestPastItsDeadlineIsAnsweredAndWithdrawnSoNoWriterStoresIt() {
        let clock = ManualClock()
        var log = Self.machine(appendTimeout: .seconds(8), clock: clock)
        _ = Self.submit(&log, "old", events: 5)
        clock.advance(by: .seconds(1))
        _ = Self.submit(&log, "new", events: 7)
        clock.advance(by: .seconds(7) - .microseconds(1))
        #expect(log.timerFired().expired.isEmpty, "a microsecond before its deadline it still waits")
        clock.advance(by: .microseconds(1))
        #expect(log.timerFired().expired == ["old"])
        #expect(log.queuedEvents == 7)
        #expect(Self.requests(log.writerReady("w", afterWrite: false)) == ["new"], "the withdrawn request is not written")
    }

    @Test func oneTimerServesEveryDeadlineAndIsSetForTheOldestUnansweredAppend() {
        let clock = ManualClock()
        var log = Self.machine(appendTimeout: .seconds(8), clock: clock)
        _ = log.writerReady("w", afterWrite: false)
        let first = Self.submitSettingTimer(&log, "a", events: 1)
        #expect(first.timer == clock.now.advanced(by: .seconds(8)), "the first append sets the timer for its deadline")
        clock.advance(by: .seconds(1))
        #expect(Self.submitSettingTimer(&log, "b", events: 1).timer == nil, "later appends need no timer of their own")
        #expect(log.claim(first.submitted.id) == "a", "a's write ends: a is answered")
        clock.advance(by: .seconds(1))
        _ = Self.submit(&log, "c", events: 1)

        clock.advance(by: .seconds(6))
        let fired = log.timerFired()
        #expect(fired.expired.isEmpty, "a was answered by its write")
        #expect(fired.scheduleTimer == TestInstant.zero.advanced(by: .seconds(9)), "set again for b, the oldest unanswered")
        clock.advance(by: .seconds(1))
        #expect(log.timerFired() == (["b"], TestInstant.zero.advanced(by: .seconds(10))))
        clock.advance(by: .seconds(1))
        #expect(log.timerFired() == (["c"], nil), "every append has its answer: no timer")
        #expect(Self.submitSettingTimer(&log, "d", events: 1).timer == clock.now.advanced(by: .seconds(8)),
                "with no timer set, the next append sets one")
    }

    @Test func aRequestBeingWrittenIsAnsweredOnceByTheDeadlineOrByTheWriteWhicheverComesFirst() {
        let clock = ManualClock()
        var log = Self.machine(appendTimeout: .seconds(8), clock: clock)
        let a = Self.submit(&log, "a", events: 1).id
        clock.advance(by: .seconds(5))
        let b = Self.submit(&log, "b", events: 1).id
        guard case .write(let group) = log.writerReady("w", afterWrite: false) else { Issue.record("a write starts"); return }
        #expect(!log.allAnswered(group.map(\.id)))
        clock.advance(by: .seconds(4))
        #expect(log.timerFired().expired == ["a"], "the write is slow: a gets its answer early")
        #expect(!log.allAnswered([a, b]), "b still waits, so the write goes on")
        #expect(log.claim(a) == nil, "the write's answer does not reach a a second time")
        #expect(log.claim(b) == "b")
        #expect(log.allAnswered([a, b]))
        clock.advance(by: .seconds(60))
        #expect(log.timerFired().expired.isEmpty, "nor does the deadline reach b")
    }

    @Test func whileEveryWriterIsStuckExpiredRequestsAreForgottenAndTheNextWriteTakesOnlyNewOnes() {
        // One writer, stuck in a write that never ends (a synchronous standby gone, say):
        // requests keep arriving and expiring; what is kept must not grow with them.
        let clock = ManualClock()
        var log = Self.machine(parallelWriteThreshold: 1_000_000, maxQueuedEvents: 10, appendTimeout: .seconds(1), clock: clock)
        _ = log.writerReady("w", afterWrite: false)
        _ = Self.submit(&log, "stuck", events: 1)   // taken at once by w
        var expired = 0
        for n in 0..<20_000 {
            _ = Self.submit(&log, "r\(n)", events: 1)
            clock.advance(by: .milliseconds(100))
            expired += log.timerFired().expired.count
        }
        // A request expires a second (ten arrivals) after it came: the last nine still wait.
        #expect(expired == 20_000 - 9 + 1, "every request but the last second's expired (the stuck one too)")
        #expect(log.queuedEvents == 9)
        #expect(log.keptArrivals < 2_048, "answered arrivals are dropped though no writer took them")
        #expect(Self.requests(log.writerReady("w", afterWrite: true))?.first == "r19991", "the write takes the oldest unanswered")
    }

    @Test func answeredArrivalsAreDroppedBetweenTimersUnderSteadyLoad() {
        // Appends answered within a millisecond, 100 000 of them before the timer fires once:
        // what is kept must not grow with them.
        let clock = ManualClock()
        var log = Self.machine(parallelWriteThreshold: 1_000_000, appendTimeout: .seconds(8), clock: clock)
        var written = 0
        for n in 0..<100_000 {
            _ = Self.submit(&log, "r\(n)", events: 1)
            guard case .write(let group) = log.writerReady("w", afterWrite: n > 0) else { continue }
            for taken in group { written += log.claim(taken.id) == nil ? 0 : 1 }
            clock.advance(by: .microseconds(50))
        }
        #expect(written == 100_000)
        #expect(log.keptArrivals < 2_048, "the timer never fired, yet answered arrivals were dropped")
    }

    @Test func withoutATimeoutNothingExpires() {
        let clock = ManualClock()
        var log = Self.machine(appendTimeout: nil, clock: clock)
        #expect(Self.submitSettingTimer(&log, "a", events: 1).timer == nil, "no deadline, no timer")
        clock.advance(by: .seconds(86_400))
        #expect(log.timerFired() == ([], nil))
        #expect(log.queuedEvents == 1)
    }

    @Test func stoppingRefusesNewRequestsAndTheWritersDrainWhatWasAcceptedThenEnd() {
        var log = Self.machine(maxGroupEvents: 10, parallelWriteThreshold: 1_000)
        _ = log.writerReady("w1", afterWrite: false)
        _ = Self.submit(&log, "a", events: 1)   // w1 writes a
        _ = log.writerReady("w2", afterWrite: false)   // parks: a write runs, below the threshold
        _ = Self.submit(&log, "b", events: 6)
        _ = Self.submit(&log, "c", events: 6)
        let woken = log.stop()
        #expect(woken.map(\.writer) == ["w2"])
        #expect(woken.first?.group?.map(\.request) == ["b"], "stopping, a parked writer starts at once")
        guard case .refused(.shuttingDown) = log.submit("d", events: 1) else { Issue.record("d is refused"); return }
        #expect(Self.requests(log.writerReady("w1", afterWrite: true)) == ["c"], "what was accepted is still written")
        guard case .finish = log.writerReady("w1", afterWrite: true), case .finish = log.writerReady("w2", afterWrite: true) else {
            Issue.record("with the queue empty, the writers end"); return
        }
    }

    @Test func stoppingAnIdleLogEndsEveryParkedWriter() {
        var log = Self.machine()
        _ = log.writerReady("w1", afterWrite: false)
        _ = log.writerReady("w2", afterWrite: false)
        let woken = log.stop()
        #expect(woken.map(\.writer).sorted() == ["w1", "w2"])
        #expect(woken.allSatisfy { $0.group == nil })
    }

    @Test func thousandsOfRequestsAreEachAnsweredExactlyOnceInArrivalOrder() {
        // Many arrivals, some expiring, exercise the dropping of passed arrivals.
        let clock = ManualClock()
        var log = Self.machine(maxGroupEvents: 7, parallelWriteThreshold: 1_000, appendTimeout: .seconds(1), clock: clock)
        var answered: [String] = []
        var written: [String] = []
        for n in 0..<5_000 {
            _ = Self.submit(&log, "r\(n)", events: 1)
            clock.advance(by: .milliseconds(1))
            if n % 3 == 0, case .write(let group) = log.writerReady("w", afterWrite: n > 0) {
                for taken in group {
                    if let r = log.claim(taken.id) { answered.append(r); written.append(r) }
                }
            }
            answered += log.timerFired().expired
        }
        while case .write(let group) = log.writerReady("w", afterWrite: true) {
            for taken in group { if let r = log.claim(taken.id) { answered.append(r); written.append(r) } }
        }
        #expect(answered.count == 5_000)
        #expect(Set(answered).count == 5_000, "no request is answered twice")
        #expect(written == written.sorted { Int($0.dropFirst())! < Int($1.dropFirst())! }, "writers take requests in arrival order")
        #expect(log.queuedEvents == 0)
    }
}

import Testing
@testable import Tracker

/// Who gets an errand's value and who its deadline, with callers as names and time set by hand.
struct ErrandsStateMachineTests {
    typealias Machine = ErrandsStateMachine<ManualClock, String>

    static func start(_ errands: inout Machine, _ caller: String, within limit: Duration,
                      sourceLocation: SourceLocation = #_sourceLocation) -> (id: Int, timer: TestInstant?) {
        guard case .run(let id, let timer) = errands.start(caller, within: limit) else {
            Issue.record("\(caller)'s errand runs", sourceLocation: sourceLocation)
            return (-1, nil)
        }
        return (id, timer)
    }

    @Test func anErrandThatEndsBeforeItsDeadlineAnswersItsCallerAndTheTimerFindsNobody() {
        let clock = ManualClock()
        var errands = Machine(clock: clock)
        let click = Self.start(&errands, "click", within: .seconds(2))
        #expect(click.timer == TestInstant.zero.advanced(by: .seconds(2)), "the timer is set for the deadline")
        clock.advance(by: .milliseconds(3))
        #expect(errands.ended(click.id) == "click")
        clock.advance(by: .seconds(2))
        #expect(errands.timerFired(click.timer!) == ([], nil), "nobody is late, and no timer is needed")
    }

    @Test func atItsDeadlineTheCallerIsAnsweredWithoutAValueAndNotAMicrosecondBefore() {
        let clock = ManualClock()
        var errands = Machine(clock: clock)
        let probe = Self.start(&errands, "probe", within: .seconds(3))
        clock.advance(by: .seconds(3) - .microseconds(1))
        #expect(errands.timerFired(probe.timer!) == ([], probe.timer), "early: nobody is late, and the timer is set again")
        clock.advance(by: .microseconds(1))
        #expect(errands.timerFired(probe.timer!) == (["probe"], nil))
        #expect(errands.ended(probe.id) == nil, "the errand ends later: its caller was answered already")
    }

    @Test func anEarlierDeadlineSetsAnEarlierTimerAndEachCallerIsAnsweredAtItsOwn() {
        let clock = ManualClock()
        var errands = Machine(clock: clock)
        let probe = Self.start(&errands, "probe", within: .seconds(3))
        let click = Self.start(&errands, "click", within: .seconds(2))
        #expect(click.timer == TestInstant.zero.advanced(by: .seconds(2)), "the click's deadline comes first")
        #expect(Self.start(&errands, "late probe", within: .seconds(3)).timer == nil, "a later deadline needs no timer")
        clock.advance(by: .seconds(2))
        #expect(errands.timerFired(click.timer!) == (["click"], probe.timer), "then the probe's deadline")
        clock.advance(by: .seconds(1))
        let fired = errands.timerFired(probe.timer!)
        #expect(Set(fired.expired) == ["probe", "late probe"])
        #expect(fired.scheduleTimer == nil)
        #expect(errands.waitingCount == 0)
    }

    @Test func callersAnsweredByTheirErrandsAreForgottenWithoutTheTimer() {
        let clock = ManualClock()
        var errands = Machine(clock: clock)
        for n in 0..<10_000 {
            let errand = Self.start(&errands, "c\(n)", within: .seconds(2))
            #expect(errands.ended(errand.id) == "c\(n)")
            clock.advance(by: .microseconds(10))
        }
        #expect(errands.waitingCount == 0)
        clock.advance(by: .seconds(2))
        #expect(errands.timerFired(TestInstant.zero.advanced(by: .seconds(2))) == ([], nil))
    }

    @Test func aStoppedServiceHandsBackItsWaitingCallersAndLaterOnesRunTheirErrandsInPlace() {
        var errands = Machine(clock: ManualClock())
        _ = Self.start(&errands, "queued", within: .seconds(2))
        #expect(errands.stop() == ["queued"])
        guard case .runInPlace = errands.start("late", within: .seconds(2)) else { Issue.record("runs in place"); return }
    }
}

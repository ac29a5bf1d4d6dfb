import Testing
@testable import TrackerPostgres

/// The connection pool's decisions, with slots and waiters as plain values and time set by hand.
struct PoolStateMachineTests {
    typealias Machine = PoolStateMachine<ManualClock, String, String>

    static func machine(maxConnections: Int = 1, clock: ManualClock = ManualClock()) -> Machine {
        Machine(maxConnections: maxConnections, acquireTimeout: .seconds(5), clock: clock)
    }

    @Test func anIdleConnectionIsLentBeforeANewOneIsOpenedAndNoMoreThanTheLimitAreOpened() {
        var pool = Self.machine(maxConnections: 2)
        guard case .open = pool.borrow(), case .open = pool.borrow() else { Issue.record("two connections open"); return }
        guard case .mustWait = pool.borrow() else { Issue.record("a third borrower waits"); return }
        guard case .keep = pool.release("a") else { Issue.record("nobody waits: the slot is kept"); return }
        #expect(pool.usage == (inUse: 1, idle: 1, waiting: 0))
        guard case .lend("a") = pool.borrow() else { Issue.record("the idle slot is lent, not a new one"); return }
        #expect(pool.usage == (inUse: 2, idle: 0, waiting: 0))
    }

    @Test func aReleasedConnectionGoesToTheBorrowerWhoWaitedLongest() {
        let clock = ManualClock()
        var pool = Self.machine(clock: clock)
        _ = pool.borrow()
        for waiter in ["first", "second", "third"] {
            let id = pool.makeBorrowID()
            guard case .queued = pool.wait(id, waiter: waiter, isCancelled: false) else { Issue.record("\(waiter) waits"); return }
            clock.advance(by: .microseconds(1))
        }
        #expect(pool.usage.waiting == 3)
        var servedInOrder: [String] = []
        for _ in 0..<3 {
            guard case .handOver(let slot, let waiter) = pool.release("the slot") else { Issue.record("a waiter is served"); return }
            #expect(slot == "the slot")
            servedInOrder.append(waiter)
        }
        #expect(servedInOrder == ["first", "second", "third"])
        guard case .keep = pool.release("the slot") else { Issue.record("with nobody waiting the slot is kept"); return }
    }

    @Test func aWaiterGivesUpAtItsDeadlineAndNotAMicrosecondBefore() {
        let clock = ManualClock()
        var pool = Self.machine(clock: clock)
        _ = pool.borrow()
        guard case .queued(let timer?) = pool.wait(pool.makeBorrowID(), waiter: "early", isCancelled: false) else {
            Issue.record("the borrower waits, and the pool's timer is set"); return
        }
        let deadline = clock.now.advanced(by: .seconds(5))
        #expect(timer == deadline, "the timer is set for the waiter's deadline")
        clock.advance(by: .seconds(1))
        guard case .queued(nil) = pool.wait(pool.makeBorrowID(), waiter: "late", isCancelled: false) else {
            Issue.record("a later waiter needs no timer of its own: the set one fires first"); return
        }

        clock.advance(by: .seconds(4) - .microseconds(1))
        let tooEarly = pool.timerFired()
        #expect(tooEarly.expired.isEmpty, "a microsecond before its deadline it still waits")
        #expect(tooEarly.scheduleTimer == deadline)
        clock.advance(by: .microseconds(1))
        let fired = pool.timerFired()
        #expect(fired.expired == ["early"])
        #expect(fired.scheduleTimer == deadline.advanced(by: .seconds(1)), "the timer is set again for the later waiter")
        clock.advance(by: .seconds(10))
        #expect(pool.timerFired() == (["late"], nil), "nobody waits: no timer")
        guard case .keep = pool.release("slot") else { Issue.record("an expired waiter is not handed a slot"); return }
    }

    @Test func aTimerWhoseWaiterWasServedFiresForNobodyAndSetsTheNextOne() {
        let clock = ManualClock()
        var pool = Self.machine(clock: clock)
        _ = pool.borrow()
        guard case .queued(let first?) = pool.wait(pool.makeBorrowID(), waiter: "served", isCancelled: false) else {
            Issue.record("the timer is set"); return
        }
        guard case .handOver(_, "served") = pool.release("slot") else { Issue.record("the waiter is served"); return }
        clock.advance(by: .seconds(2))
        guard case .queued(nil) = pool.wait(pool.makeBorrowID(), waiter: "next", isCancelled: false) else {
            Issue.record("the timer still set is kept, not cancelled and set again"); return
        }
        clock.advance(by: .seconds(3))
        let fired = pool.timerFired()
        #expect(fired.expired.isEmpty && fired.scheduleTimer == first.advanced(by: .seconds(2)),
                "it fails nobody and is set for the waiter that came since")
    }

    @Test func aCancelledWaiterLeavesTheQueueAndTheNextOneIsServed() {
        var pool = Self.machine()
        _ = pool.borrow()
        let a = pool.makeBorrowID(), b = pool.makeBorrowID()
        _ = pool.wait(a, waiter: "a", isCancelled: false)
        _ = pool.wait(b, waiter: "b", isCancelled: false)
        #expect(pool.cancel(a) == "a")
        #expect(pool.cancel(a) == nil, "a waiter is failed once")
        guard case .handOver(_, "b") = pool.release("slot") else { Issue.record("b is served"); return }
        #expect(pool.cancel(b) == nil, "a served borrower is not cancelled")
    }

    @Test func aBorrowerCancelledBeforeItWaitsFailsButIsServedIfAConnectionIsFree() {
        var pool = Self.machine()
        _ = pool.borrow()
        guard case .failCancelled = pool.wait(pool.makeBorrowID(), waiter: "x", isCancelled: true) else {
            Issue.record("a cancelled borrower does not wait"); return
        }
        #expect(pool.usage.waiting == 0)
        _ = pool.release("slot")
        guard case .lend("slot") = pool.wait(pool.makeBorrowID(), waiter: "y", isCancelled: true) else {
            Issue.record("a free connection is lent whatever the task's state"); return
        }
    }

    @Test func closingClosesIdleConnectionsAndEveryOneReturnedLaterAndRefusesBorrowers() {
        var pool = Self.machine(maxConnections: 2)
        _ = pool.borrow(); _ = pool.borrow()
        _ = pool.release("idle")
        let closed = pool.close()
        #expect(closed.idle == ["idle"])
        #expect(closed.waiters.isEmpty)
        #expect(pool.isClosed)
        guard case .failClosed = pool.borrow() else { Issue.record("a closed pool lends nothing"); return }
        guard case .close("lent") = pool.release("lent") else { Issue.record("a connection returned after closing is closed"); return }
    }

    @Test func closingFailsEveryWaiter() {
        var pool = Self.machine()
        _ = pool.borrow()
        _ = pool.wait(pool.makeBorrowID(), waiter: "a", isCancelled: false)
        _ = pool.wait(pool.makeBorrowID(), waiter: "b", isCancelled: false)
        #expect(pool.close().waiters == ["a", "b"])
        guard case .failClosed = pool.wait(pool.makeBorrowID(), waiter: "c", isCancelled: false) else {
            Issue.record("nobody waits on a closed pool"); return
        }
    }
}

import Testing
@testable import TrackerPostgres

/// The connection pool's decisions, with slots and waiters as plain values and time set by hand.
struct PoolStateMachineTests {
    typealias Machine = PoolStateMachine<TestInstant, String, String>

    @Test func anIdleConnectionIsLentBeforeANewOneIsOpenedAndNoMoreThanTheLimitAreOpened() {
        var pool = Machine(maxConnections: 2, acquireTimeout: .seconds(5))
        guard case .open = pool.borrow(), case .open = pool.borrow() else { Issue.record("two connections open"); return }
        guard case .mustWait = pool.borrow() else { Issue.record("a third borrower waits"); return }
        guard case .keep = pool.release("a") else { Issue.record("nobody waits: the slot is kept"); return }
        #expect(pool.usage == (inUse: 1, idle: 1, waiting: 0))
        guard case .lend("a") = pool.borrow() else { Issue.record("the idle slot is lent, not a new one"); return }
        #expect(pool.usage == (inUse: 2, idle: 0, waiting: 0))
    }

    @Test func aReleasedConnectionGoesToTheBorrowerWhoWaitedLongest() {
        var pool = Machine(maxConnections: 1, acquireTimeout: .seconds(5))
        var clock = ManualClock()
        _ = pool.borrow()
        for waiter in ["first", "second", "third"] {
            let id = pool.makeBorrowID()
            guard case .queued = pool.wait(id, waiter: waiter, isCancelled: false, now: clock.now) else { Issue.record("\(waiter) waits"); return }
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
        var pool = Machine(maxConnections: 1, acquireTimeout: .seconds(5))
        var clock = ManualClock()
        _ = pool.borrow()
        let early = pool.makeBorrowID()
        guard case .queued(let deadline) = pool.wait(early, waiter: "early", isCancelled: false, now: clock.now) else {
            Issue.record("the borrower waits"); return
        }
        #expect(deadline == clock.now.advanced(by: .seconds(5)))
        clock.advance(by: .seconds(1))
        _ = pool.wait(pool.makeBorrowID(), waiter: "late", isCancelled: false, now: clock.now)
        #expect(pool.nextDeadline == deadline)

        #expect(pool.expire(now: deadline.advanced(by: .microseconds(-1))).isEmpty)
        #expect(pool.expire(now: deadline) == ["early"])
        #expect(pool.nextDeadline == deadline.advanced(by: .seconds(1)), "the later waiter still waits")
        #expect(pool.expire(now: deadline.advanced(by: .seconds(10))) == ["late"])
        #expect(pool.nextDeadline == nil)
        guard case .keep = pool.release("slot") else { Issue.record("an expired waiter is not handed a slot"); return }
    }

    @Test func aCancelledWaiterLeavesTheQueueAndTheNextOneIsServed() {
        var pool = Machine(maxConnections: 1, acquireTimeout: .seconds(5))
        _ = pool.borrow()
        let a = pool.makeBorrowID(), b = pool.makeBorrowID()
        _ = pool.wait(a, waiter: "a", isCancelled: false, now: .zero)
        _ = pool.wait(b, waiter: "b", isCancelled: false, now: .zero)
        #expect(pool.cancel(a) == "a")
        #expect(pool.cancel(a) == nil, "a waiter is failed once")
        guard case .handOver(_, "b") = pool.release("slot") else { Issue.record("b is served"); return }
        #expect(pool.cancel(b) == nil, "a served borrower is not cancelled")
    }

    @Test func aBorrowerCancelledBeforeItWaitsFailsButIsServedIfAConnectionIsFree() {
        var pool = Machine(maxConnections: 1, acquireTimeout: .seconds(5))
        _ = pool.borrow()
        guard case .failCancelled = pool.wait(pool.makeBorrowID(), waiter: "x", isCancelled: true, now: .zero) else {
            Issue.record("a cancelled borrower does not wait"); return
        }
        #expect(pool.usage.waiting == 0)
        _ = pool.release("slot")
        guard case .lend("slot") = pool.wait(pool.makeBorrowID(), waiter: "y", isCancelled: true, now: .zero) else {
            Issue.record("a free connection is lent whatever the task's state"); return
        }
    }

    @Test func closingClosesIdleConnectionsAndEveryOneReturnedLaterAndRefusesBorrowers() {
        var pool = Machine(maxConnections: 2, acquireTimeout: .seconds(5))
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
        var pool = Machine(maxConnections: 1, acquireTimeout: .seconds(5))
        _ = pool.borrow()
        _ = pool.wait(pool.makeBorrowID(), waiter: "a", isCancelled: false, now: .zero)
        _ = pool.wait(pool.makeBorrowID(), waiter: "b", isCancelled: false, now: .zero)
        #expect(pool.close().waiters == ["a", "b"])
        guard case .failClosed = pool.wait(pool.makeBorrowID(), waiter: "c", isCancelled: false, now: .zero) else {
            Issue.record("nobody waits on a closed pool"); return
        }
    }
}

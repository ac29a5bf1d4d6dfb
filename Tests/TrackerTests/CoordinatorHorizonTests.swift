import Testing
@testable import Tracker

/// When a horizon taken on a Citus coordinator may be read below: only once the two-phase
/// transactions prepared on the workers when it was taken have finished.
struct CoordinatorHorizonTests {
    @Test func aHorizonIsUsableAtOnceWhenNoWorkerHasAPreparedTransaction() {
        var h = CoordinatorHorizon()
        let listing = h.beginListing(after: 100)
        #expect(h.observe(listing, prepared: []) == 100)
    }

    @Test func aHorizonWaitsUntilTheTransactionsPreparedWhenItWasTakenHaveFinished() {
        var h = CoordinatorHorizon()
        #expect(h.observe(h.beginListing(after: 100), prepared: []) == 100)
        // At 200 a transaction is prepared on a worker: it may be below 200, its rows not yet visible.
        #expect(h.observe(h.beginListing(after: 200), prepared: ["w1/citus_0_1_1_0"]) == 100)
        // Still prepared at the next look: 200 must wait.
        #expect(h.observe(h.beginListing(after: 210), prepared: ["w1/citus_0_1_1_0", "w2/citus_0_2_5_0"]) == 100)
        // It finished; another prepared since does not hold back 200 (it began after 200 was taken).
        #expect(h.observe(h.beginListing(after: 220), prepared: ["w2/citus_0_2_5_0"]) == 200)
    }

    @Test func aPreparedTransactionThatNeverEndsHoldsTheHorizonWhereItWas() {
        var h = CoordinatorHorizon()
        #expect(h.observe(h.beginListing(after: 50), prepared: []) == 50)
        for taken in stride(from: UInt64(60), through: 600, by: 60) {
            #expect(h.observe(h.beginListing(after: taken), prepared: ["w1/in-doubt"]) == 50)
        }
        // Citus's recovery commits it: the newest horizon is usable again.
        #expect(h.observe(h.beginListing(after: 700), prepared: []) == 700)
    }

    @Test func aListingThatBeganBeforeTheWaitingOneWasSeenDoesNotDrainIt() {
        var h = CoordinatorHorizon()
        // Two readers at once: the first began its listing before the second's was observed.
        let early = h.beginListing(after: 300)
        let late = h.beginListing(after: 310)
        #expect(h.observe(late, prepared: ["w1/a"]) == 0)
        // The early listing did not see "w1/a" (it had not prepared yet when it looked): that
        // says nothing about whether "w1/a" has finished.
        #expect(h.observe(early, prepared: ["w1/b"]) == 0)
        #expect(h.observe(h.beginListing(after: 320), prepared: ["w1/b"]) == 310)
    }

    @Test func theUsableHorizonNeverGoesBack() {
        var h = CoordinatorHorizon()
        let old = h.beginListing(after: 90)
        #expect(h.observe(h.beginListing(after: 120), prepared: []) == 120)
        #expect(h.observe(old, prepared: []) == 120)
    }

    @Test func nothingIsUsableBeforeTheFirstListingFindsTheWorkersQuiet() {
        var h = CoordinatorHorizon()
        #expect(h.usable == 0)
        #expect(h.observe(h.beginListing(after: 40), prepared: ["w1/x"]) == 0)
        #expect(h.observe(h.beginListing(after: 45), prepared: []) == 45)
    }
}

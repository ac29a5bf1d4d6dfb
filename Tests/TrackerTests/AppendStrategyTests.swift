import Testing
@testable import Tracker

/// Which statement the log writes a group with (`AppendStrategy`).
struct AppendStrategyTests {
    @Test func groupsTryThePlainAppendUntilOneMeetsAStoredId() {
        var strategy = AppendStrategy()
        #expect(strategy.triesPlainAppend)
        for _ in 0..<100 { strategy.record(metStoredId: false) }
        #expect(strategy.triesPlainAppend)
        strategy.record(metStoredId: true)
        #expect(!strategy.triesPlainAppend)
    }

    @Test func afterAConflictTheNextGroupsCheckForConflictsUntilEnoughFoundNone() {
        var strategy = AppendStrategy()
        strategy.record(metStoredId: true)
        var cautious = 0
        while !strategy.triesPlainAppend {
            cautious += 1
            strategy.record(metStoredId: false)
        }
        #expect(cautious == AppendStrategy.cautiousGroups)
    }

    @Test func aBurstOfRetriesKeepsTheConflictCheckingStatement() {
        var strategy = AppendStrategy()
        strategy.record(metStoredId: true)
        for _ in 0..<(AppendStrategy.cautiousGroups - 1) { strategy.record(metStoredId: false) }
        strategy.record(metStoredId: true)   // one more retry: the count starts again
        for _ in 0..<(AppendStrategy.cautiousGroups - 1) { strategy.record(metStoredId: false) }
        #expect(!strategy.triesPlainAppend)
        strategy.record(metStoredId: false)
        #expect(strategy.triesPlainAppend)
    }
}

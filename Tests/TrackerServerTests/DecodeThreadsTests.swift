#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import TrackerServer

/// Decoding yields the cores to the event loops only once a backlog has built up.
struct DecodeThreadsTests {
    #if os(Linux)
    @Test func aBacklogOfDecodesRunsBelowTheEventLoopsPriority() async throws {
        let ownNice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        // Each job takes 200 ms, so all of them are under way before the first few end.
        let jobs = DecodeThreads.backlog + 4
        let nices = try await withThrowingTaskGroup(of: Int32.self) { group in
            for _ in 0..<jobs {
                group.addTask {
                    try await DecodeThreads.run {
                        usleep(200_000)
                        return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
                    }
                }
            }
            return try await group.reduce(into: [Int32]()) { $0.append($1) }
        }
        #expect(nices.filter { $0 == ownNice }.count >= 1, "the first decodes keep the process's priority: \(nices)")
        #expect(nices.filter { $0 == ownNice + DecodeThreads.niceness }.count >= 1, "the backlog's run \(DecodeThreads.niceness) below: \(nices)")
        #expect(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) == ownNice, "the caller's thread is untouched")
    }
    #endif
}

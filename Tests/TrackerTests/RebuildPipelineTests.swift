import Testing
@testable import Tracker

/// The rebuild's projecting on every core: files come out in order, and a pipeline the COPY
/// left early is stopped and released without harm.
struct RebuildPipelineTests {
    private func emptyFiles(_ count: Int) throws -> RebuildBuckets {
        let buckets = try RebuildBuckets(expectedEvents: count, eventsPerBucket: 1)
        try buckets.finishSpilling()
        return buckets
    }

    @Test func everyFileIsHandedOutInOrder() throws {
        let buckets = try emptyFiles(12)
        let pipeline = RebuildPipeline(buckets: buckets, rules: AdContribution(), workers: 3, lookahead: 2)
        for index in 0..<buckets.count {
            guard case .success(let file) = pipeline.take(index) else {
                Issue.record("file \(index) failed")
                return
            }
            #expect(file.events == 0 && file.rows.isEmpty)
        }
    }

    @Test func aPipelineLeftEarlyIsStoppedAndReleased() async throws {
        var pipeline: RebuildPipeline? = RebuildPipeline(buckets: try emptyFiles(10), rules: AdContribution(), workers: 2)
        guard case .success = pipeline!.take(0) else {
            Issue.record("file 0 failed")
            return
        }
        // The COPY ends here, once the workers have filled the window again: the files they
        // projected (as many as the window holds) are never taken.
        try await Task.sleep(for: .milliseconds(500))
        pipeline!.stop()
        try await Task.sleep(for: .milliseconds(500))  // the workers finish the files they are on and leave
        // Released with projected files left over: libdispatch aborted the process here when
        // the window semaphore ended below the value it was made with.
        weak var released = pipeline
        pipeline = nil
        #expect(released == nil, "the workers left and nothing else holds the pipeline")
    }
}

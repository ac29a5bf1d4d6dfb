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
        let pipeline = RebuildPipeline(buckets: buckets, rules: AdContribution(), sum: try RebuildSum(directory: buckets.directory, rowsInMemory: 10),
                                       workers: 3, lookahead: 2)
        for index in 0..<buckets.count {
            guard case .success(let file) = pipeline.take(index) else {
                Issue.record("file \(index) failed")
                return
            }
            #expect(file.events == 0 && file.rows.isEmpty)
        }
    }

    @Test func aPipelineLeftEarlyIsStoppedAndReleased() async throws {
        let buckets = try emptyFiles(10)
        var pipeline: RebuildPipeline? = RebuildPipeline(buckets: buckets, rules: AdContribution(),
                                                         sum: try RebuildSum(directory: buckets.directory, rowsInMemory: 10), workers: 2)
        guard case .success = pipeline!.take(0) else {
            Issue.record("file 0 failed")
            return
        }
        // The COPY ends here, once the threads have projected the files queued after the
        // first: those (as many as the lookahead holds) are never taken.
        try await Task.sleep(for: .milliseconds(500))
        pipeline!.stop()
        try await Task.sleep(for: .milliseconds(500))  // the threads finish the files they are on and stop
        // Released with projected files left over and files never started: nothing holds it
        // once its threads finished, and releasing it stops nothing twice or in a bad state.
        weak let released = pipeline
        pipeline = nil
        #expect(released == nil, "the threads stopped and nothing else holds the pipeline")
    }
}

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

/// The rebuild's sum written in parts: each day row's quarter hours reach the writer in one
/// part, so a day row (and each of its half-day rows) is written once into the tables the
/// rebuild makes, leaving no dead versions behind for every report to read past.
struct RebuildSumPartsTests {
    private func parts(rowsInMemory: Int) throws -> (written: [Contribution], sent: Contribution) {
        let buckets = try RebuildBuckets(expectedEvents: 1, eventsPerBucket: 1)
        defer { withExtendedLifetime(buckets) {} }
        let sum = try RebuildSum(directory: buckets.directory, rowsInMemory: rowsInMemory)
        var sent = Contribution()
        // 40 asset keys, every quarter hour of three UTC days: 11 520 rows, 120 day rows.
        let firstDay = QuarterHour(Timestamp(microseconds: 1_764_288_000 * 1_000_000)).index
        for asset in 0..<40 {
            var one = Contribution()
            for quarter in firstDay..<(firstDay + 3 * QuarterHour.perDay) {
                let key = ProjectionKey(table: .asset, trafficClass: .plain, quarterHour: QuarterHour(index: quarter),
                                        adUnit: "/6499/feed", formatId: "native", assetKey: "k\(asset)")
                one.add(key, AssetMeasure.clicks)
            }
            sent.add(one)
            try sum.add(one)
        }
        var written: [Contribution] = []
        try sum.write(rowsPerWrite: 500) { written.append($0) }
        return (written, sent)
    }

    @Test(arguments: [1_000_000, 4_000])
    func eachDayRowIsWrittenInOnePartAndThePartsAddUpToTheSum(rowsInMemory: Int) throws {
        let (written, sent) = try parts(rowsInMemory: rowsInMemory)
        #expect(written.count > 1)
        var partOf: [ProjectionKey: Int] = [:]
        var total = Contribution()
        for (index, part) in written.enumerated() {
            total.add(part)
            for key in part.rows.keys {
                let earlier = partOf.updateValue(index, forKey: key.dayRow)
                #expect(earlier == nil || earlier == index, "a day row in parts \(String(describing: earlier)) and \(index)")
            }
        }
        #expect(partOf.count == 120)
        #expect(total.rows == sent.rows)
    }
}

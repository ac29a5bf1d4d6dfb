import Testing
@testable import Tracker

/// How many partitions a distribution in place copies at once: each copy holds a connection per
/// shard on every worker, so a worker's free connections bound them.
struct CopyParallelismTests {
    @Test func aWorkerWithRoomCopiesAsManyPartitionsAtOnceAsCitusWould() {
        let plan = CopyParallelism(shardCount: 32, workers: 2, freeConnections: 990)
        #expect(plan.shardsPerWorker == 16)
        #expect(plan.copies == CopyParallelism.citusDefault)
    }

    @Test func postgresDefaultHundredConnectionsCopyFewerPartitionsAtOnceWithinThem() {
        // max_connections 100, 3 reserved, a few sessions open.
        let plan = CopyParallelism(shardCount: 32, workers: 2, freeConnections: 92)
        #expect(plan.copies == 5)
        #expect(plan.copies * plan.shardsPerWorker + CopyParallelism.servingHeadroom <= 92)
    }

    @Test func aWorkerThatCannotTakeOneCopyIsNamedBeforeAnythingChanges() {
        let plan = CopyParallelism(shardCount: 32, workers: 1, freeConnections: 40)
        #expect(plan.shardsPerWorker == 32)
        #expect(plan.copies == 0)
        #expect(plan.leastFree == 42)
    }

    @Test func shardsThatDoNotDivideEvenlyCountTheBusiestWorker() {
        #expect(CopyParallelism(shardCount: 32, workers: 3, freeConnections: 100).shardsPerWorker == 11)
    }
}

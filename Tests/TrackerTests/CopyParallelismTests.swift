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

    @Test func aNodeWithoutShardsIsNotHeldToTheCopysConnections() throws {
        // A crowded node that takes no shards (shouldhaveshards = false) opens no copy connection.
        let crowded = try CopyParallelism.check(node: "10.0.0.9:5432", takesShards: false, freeWorkers: 0, freeConnections: 3,
                                                shardCount: 32, shardNodes: 2, concurrent: true)
        #expect(crowded == nil)
        #expect(throws: DistributionError.self) {
            try CopyParallelism.check(node: "10.0.0.1:5432", takesShards: true, freeWorkers: 8, freeConnections: 3,
                                      shardCount: 32, shardNodes: 2, concurrent: true)
        }
    }

    @Test func aShardNodeShortOfBackgroundWorkersIsNamedWithTheSetting() {
        do {
            _ = try CopyParallelism.check(node: "10.0.0.1:5432", takesShards: true, freeWorkers: 1, freeConnections: 500,
                                          shardCount: 32, shardNodes: 2, concurrent: true)
            Issue.record("a node with one free background worker passed")
        } catch {
            #expect(error.description.contains("max_worker_processes"))
            #expect(error.description.contains("10.0.0.1:5432"))
        }
    }

    @Test func anEmptyLogNeedsNoCopyConnectionsYetStillCopiesAtLeastOneAtATime() throws {
        let copies = try CopyParallelism.check(node: "10.0.0.1:5432", takesShards: true, freeWorkers: 0, freeConnections: 3,
                                               shardCount: 32, shardNodes: 2, concurrent: false)
        #expect(copies == 1)
    }
}

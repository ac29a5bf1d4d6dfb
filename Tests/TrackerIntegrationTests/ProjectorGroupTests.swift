import Foundation
import Logging
import Testing
import TrackerPostgres
@testable import Tracker

/// What the projectors of groups of shards rest on that a single node can show: how a log's
/// shards are dealt, the `high_rate` counts of two steps that count into one client's minute at
/// once, and the refusal of a group where the log is not distributed. (Two projectors over a
/// distributed log: `make test-citus`, part projector-groups.)
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct ProjectorGroupTests {
    @Test func groupsAreReadAsKOfNAndEveryShardHasOneGroup() throws {
        #expect(ProjectorGroup("1/2") == ProjectorGroup(index: 1, count: 2))
        for bad in ["", "2", "0/2", "3/2", "1/0", "a/b", "1/2/3", "-1/2", "1/1025"] {
            #expect(ProjectorGroup(bad) == nil, "\(bad) is refused")
        }
        let shards: [Int64] = [102_017, 102_008, 102_009, 102_010, 102_011, 102_012, 102_013]
        for n in 1...4 {
            let groups = (1...n).map { ProjectorGroup(index: $0, count: n)!.shards(of: shards) }
            #expect(groups.reduce(0) { $0 + $1.count } == shards.count, "no shard in two groups of \(n)")
            #expect(Set(groups.flatMap { $0 }) == Set(shards), "every shard in a group of \(n)")
            #expect(groups.allSatisfy { abs($0.count - shards.count / n) <= 1 }, "shares differ by one at most: \(groups.map(\.count))")
        }
        // The deal follows the shards' ids, not the order a listing gives them in.
        #expect(ProjectorGroup("1/2")!.shards(of: shards) == ProjectorGroup("1/2")!.shards(of: shards.reversed()))
    }

    /// Two steps count events into the same new client minute at once: the second waits for the
    /// first and adds to its count. Written over instead, a minute would hold the last step's
    /// events only and `high_rate` would miss a client whose events two groups read.
    @Test func twoStepsCountingIntoOneClientMinuteAtOnceAddUp() async throws {
        try await withTestDatabase { db in
            let group = ClientGroup(minute: 29_000_000, userAgent: 7, address: [2, 32, 0, 4, 198, 51, 100, 7])
            func addition(_ n: Int, _ prefix: String) -> [ClientGroup: GroupAddition] {
                [group: GroupAddition(events: n, members: (0..<n).map { GroupMember(requestId: "\(prefix)-\($0)", id: PackedUUID(high: UInt64($0), low: 1)) })]
            }
            let first = try Connection.open(db.url), second = try Connection.open(db.url)
            defer { first.close(); second.close() }
            try first.execute("BEGIN")
            let a = try ClientMinutes.count(addition(3, "a"), limit: 4, concurrently: true, on: first)
            #expect(a.overLimit.isEmpty)
            let other = Held(second), more = addition(2, "b")
            let counted = Task.detached { () throws -> (Set<ClientGroup>, [GroupMember]) in
                try other.connection.transaction { try ClientMinutes.count(more, limit: 4, concurrently: true, on: other.connection) }
            }
            try await Task.sleep(for: .milliseconds(300))
            try first.execute("COMMIT")
            let (overLimit, relabel) = try await counted.value
            #expect(overLimit == [group], "3 + 2 events is over the limit of 4")
            #expect(Set(relabel.map(\.requestId)) == ["a-0", "a-1", "a-2"], "the first step's events are relabelled: \(relabel)")
            #expect(try await db.scalar("SELECT events FROM client_minutes") == "5")
        }
    }

    @Test func aGroupWhereTheLogIsNotDistributedStopsWithAClearError() async throws {
        try await withTestDatabase { db in
            let projector = Projector(pool: db.pool, group: ProjectorGroup("1/2"), logger: Logger(label: "test"))
            await #expect {
                try await projector.step()
            } throws: { error in
                guard case ProjectorError.groupsNeedADistributedLog(let group) = error else { return false }
                return group == "1/2" && "\(error)".contains("not distributed")
            }
        }
    }
}

/// A connection handed to one other task, which alone uses it until the test reads its result.
private struct Held: @unchecked Sendable {
    let connection: Connection
    init(_ connection: Connection) { self.connection = connection }
}

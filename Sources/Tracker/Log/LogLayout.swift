#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOConcurrencyHelpers
import NIOPosix
import Synchronization

/// Where the log's rows live, and so how its order is read.
enum LogLayout: Sendable {
    /// One table, without Citus: a row below the snapshot's xmin can no longer appear.
    case singleNode
    /// One table on a Citus coordinator: the extension is installed but the log is not (yet)
    /// distributed, or is being distributed by `tracker migrate`. Read as on a single node, below
    /// the coordinator's two-phase-safe horizon (`CoordinatorHorizon`), since appends may already
    /// be distributed transactions.
    case coordinator(CitusLog)
    /// The log on the shards of a Citus cluster (`sql/citus/distribute.sql`): each shard read on
    /// the worker that holds it, with a checkpoint of its own.
    case citus(CitusLog)

    /// The layout of the database `conninfo` names. A distributed log stays distributed, so that
    /// answer is kept for the process's life; the others are asked again when older than
    /// `maxAge`, because `tracker migrate` may distribute the log while this process runs.
    static func of(_ connection: Connection, conninfo: String, maxAge: Duration = .seconds(1)) throws -> LogLayout {
        let now = ContinuousClock.now
        if let kept = known.withLock({ $0[conninfo] }) {
            if case .citus = kept.layout { return kept.layout }
            if now - kept.checked < maxAge { return kept.layout }
        }
        let r = try connection.query(CitusSQL.layout)
        let extensionInstalled = r.bool(0, 0) ?? false, distributed = r.bool(0, 1) ?? false
        return known.withLock { cache in
            let log = cache[conninfo]?.log ?? (extensionInstalled ? CitusLog(conninfo: conninfo) : nil)
            let layout: LogLayout = switch (log, distributed) {
            case (let log?, true): .citus(log)
            case (let log?, false): .coordinator(log)
            case (nil, _): .singleNode
            }
            cache[conninfo] = Known(layout: layout, checked: now, log: log)
            return layout
        }
    }

    /// The layout as it is now, asked in the caller's transaction: a projector step reads it
    /// under the projector lock, which the distribution holds while it changes the layout, so
    /// no step straddles the change.
    func refreshed(on connection: Connection) throws -> LogLayout {
        if case .citus = self { return self }
        return try Self.of(connection, conninfo: connection.conninfo, maxAge: .zero)
    }

    /// The distributed log of the database `conninfo` names, when a read of this process found
    /// it distributed (it stays so); `nil` when none did yet, without asking the database.
    static func knownDistributed(conninfo: String) -> CitusLog? {
        known.withLock { $0[conninfo]?.layout.citus }
    }

    private struct Known {
        var layout: LogLayout
        var checked: ContinuousClock.Instant
        /// Kept across layouts: its worker connections and its horizon's state.
        var log: CitusLog?
    }

    private static let known = Mutex<[String: Known]>([:])

    /// The distributed log, when the log is distributed.
    var citus: CitusLog? {
        if case .citus(let log) = self { return log }
        return nil
    }

    /// The next `limit` events past the checkpoint `(tx, seq)` of a log held in one table (the
    /// binary columns of `ProjectorSQL.nextEvents`), below the horizon of this layout.
    func nextEvents(after tx: String, _ seq: Int64, limit: Int, on connection: Connection) throws -> QueryResult {
        var parameters: [Parameter] = [.text(tx), .text(String(seq)), .text(String(limit))]
        switch self {
        case .singleNode, .citus:
            return try connection.query(ProjectorSQL.nextEvents, parameters, binaryResults: true)
        case .coordinator(let log):
            parameters.append(.text(String(try log.coordinatorHorizon(on: connection, patience: .step))))
            return try connection.query(CitusSQL.coordinatorNextEvents, parameters, binaryResults: true)
        }
    }
}

/// A Citus worker, as `pg_dist_node` names it.
struct WorkerNode: Hashable, Sendable, CustomStringConvertible {
    var host: String
    var port: Int
    var description: String { "\(host):\(port)" }
}

/// One cursor over a shard of the distributed log: the shard's table on the worker that holds
/// it now, and how far its rows are projected.
///
/// A shard's rows carry the coordinator's order. A log distributed by an older tracker has rows
/// stamped in their worker's order in the partitions before a day (`log_order`): such a shard
/// has a second cursor over those, read below the worker's own horizon, until they are all
/// projected.
struct LogShard: Sendable, Hashable {
    enum Order: Sendable, Hashable {
        /// Rows stamped by the coordinator; received from `from` (a UTC day) on when set.
        case coordinator(from: String?)
        /// Rows received before the UTC day `before`, stamped by the worker that stored them.
        case worker(before: String)
    }

    var id: Int64
    /// The shard's table on its worker (`events_102008`), as Citus names it.
    var table: String
    var node: WorkerNode
    var checkpoint: LogPosition
    var order: Order

    /// The key of this cursor's checkpoint in a step: the shard's id, negated for its
    /// worker-stamped rows.
    var cursor: Int64 {
        if case .worker = order { return -id }
        return id
    }
}

/// The cursors of the distributed log as one read found them, with the coordinator's snapshot
/// xmin of that read (a horizon not yet known usable: `CoordinatorHorizon`).
struct LogShards: Sendable {
    var all: [LogShard]
    var taken: UInt64
    /// Whether the worker-stamped rows' day is more than an hour past: once none of those rows
    /// waits, their cursors can retire.
    var workerOrderDue: Bool
    /// Entries in the groups' inbox (`projection_inbox`), of every shard.
    var inboxEntries = 0
    /// The lowest and highest sequence number in the inbox (`nil`: it is empty).
    var inboxSeqs: ClosedRange<Int64>?

    var count: Int { all.count }
    var nodes: Set<WorkerNode> { Set(all.map(\.node)) }
}

/// A shard's rows up to a point: how many wait behind the checkpoint (counted up to a cap),
/// since when, and whether any of them is readable yet.
struct ShardBacklog: Sendable {
    var events: Int
    /// Seconds since the oldest of them was received (`nil` when none waits).
    var seconds: Double?
    var readable: Bool
}

/// The log spread over Citus workers. Rows carry the coordinator's transaction id and sequence
/// (a value that moves with the row when a shard moves), so every shard is read in one order,
/// below one horizon: the coordinator's, once the workers' prepared transactions allow it
/// (`CoordinatorHorizon`). Reads go to the workers directly, all at once, on connections made
/// from the coordinator's connection string with the worker's host and port.
final class CitusLog: Sendable {
    let conninfo: String
    private let workers: WorkerConnections
    /// The workers' reads, prepared on each worker connection under one name per distinct text.
    /// Every read asks for all of a worker's shards (checkpoints are parameters), so a text
    /// depends only on which shards the worker holds and a connection plans it once: planning a
    /// union over every shard's daily partitions costs more than running it.
    private let statements = Mutex<[String: PreparedStatement]>([:])
    private let horizon = Mutex(CoordinatorHorizon())
    /// When this process last tried to prune the marks of connections that are gone (`recordDrained`).
    private let lastPrune = Mutex<ContinuousClock.Instant?>(nil)
    /// Threads that read on the other workers while the caller's thread reads on one.
    private let threads: NIOThreadPool

    init(conninfo: String) {
        self.conninfo = conninfo
        self.workers = WorkerConnections(conninfo: conninfo)
        threads = NIOThreadPool(numberOfThreads: 8)
        threads.start()
    }

    deinit {
        threads.shutdownGracefully { _ in }
    }

    /// Every cursor of the log with its checkpoint (from `log_shards`, as the search path finds
    /// it: a rebuild's own copy while it catches up), and the coordinator's horizon taken in the
    /// same snapshot: the placements are those of that moment or later.
    func shards(on coordinator: Connection) throws -> LogShards {
        let r = try coordinator.query(CitusSQL.shards)
        var shards: [LogShard] = []
        shards.reserveCapacity(r.rowCount)
        for row in 0..<r.rowCount {
            guard let id = r.int64(row, 0), let table = r.string(row, 1), let host = r.string(row, 2),
                  let port = r.int64(row, 3), let tx = r.string(row, 4), let seq = r.string(row, 5) else {
                throw DatabaseError(.unexpectedResult, serverMessage: "log_shards: an unreadable row")
            }
            if (r.int64(row, 8) ?? 1) != 1 { throw ProjectorError.shardReplicated(shard: id) }
            let node = WorkerNode(host: host, port: Int(port))
            let from = r.string(row, 9)
            if let from, let workerTx = r.string(row, 6), let workerSeq = r.string(row, 7) {
                // Worker-stamped rows mean something only on the worker that stamped them.
                if r.bool(row, 10) != true { throw ProjectorError.shardMoved(shard: id, node: node.description) }
                shards.append(LogShard(id: id, table: table, node: node, checkpoint: LogPosition(tx: workerTx, seq: workerSeq),
                                       order: .worker(before: from)))
            }
            shards.append(LogShard(id: id, table: table, node: node, checkpoint: LogPosition(tx: tx, seq: seq),
                                   order: .coordinator(from: from)))
        }
        guard !shards.isEmpty, let taken = r.string(0, 11).flatMap(UInt64.init) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "log_shards lists no shard of the log")
        }
        let inbox = r.int64(0, 14).flatMap { low in r.int64(0, 15).map { low...max(low, $0) } }
        return LogShards(all: shards, taken: taken, workerOrderDue: r.bool(0, 12) ?? false, inboxEntries: Int(r.int64(0, 13) ?? 0),
                         inboxSeqs: inbox)
    }

    /// `read` over the cursors as a listing finds them, listed again (up to three listings) while
    /// a worker no longer has a listed shard's table. A listing names where a shard was; if the
    /// shard moves before the read reaches its worker and Citus drops the old placement (the
    /// rebalancer's next move drops the last one's as it starts, a fraction of a second after
    /// its commit), that read fails with `undefinedTable`, and only a newer listing says where
    /// the rows are. A read that succeeds on an old placement not yet dropped is right all the
    /// same: the rows committed before the listing are there, as on the new one. (A projector
    /// step needs none of this: it fails whole, commits nothing, and is stepped again.)
    func reading<T>(on coordinator: Connection, _ read: (LogShards) throws -> T) throws -> T {
        var listings = 1
        while true {
            let shards = try shards(on: coordinator)
            do {
                return try read(shards)
            } catch let error as DatabaseError where error.state == .undefinedTable && listings < 3 {
                listings += 1
            }
        }
    }

    /// How long a reader waits for the workers' prepared transactions before it reads below an
    /// older horizon (a projector step: a few milliseconds, it steps again soon) or gives up on
    /// the newest (a rebuild: longer than Citus's recovery of an in-doubt commit).
    enum Patience {
        case step
        case rebuild

        var listings: Int { self == .step ? 3 : 800 }
    }

    /// The newest horizon below which every row is final on every node: `taken` (the
    /// coordinator's snapshot xmin, read before) once a listing of the prepared transactions on
    /// `nodes` allows it, else an older horizon a previous listing allowed (0: none yet).
    func usableHorizon(taken: UInt64, nodes: Set<WorkerNode>, patience: Patience) throws -> UInt64 {
        var usable: UInt64 = 0
        for attempt in 0..<patience.listings {
            if attempt > 0 { usleep(attempt < 5 ? 2_000 : 100_000) }
            let listing = horizon.withLock { $0.beginListing(after: taken) }
            let prepared = try onEachNode(nodes.sorted { $0.description < $1.description }.map { ($0, []) }) { node, _, c in
                Set(try c.query(CitusSQL.prepared).rows.compactMap { $0.first ?? nil }.map { "\(node)/\($0)" })
            }.reduce(into: Set<String>()) { $0.formUnion($1) }
            usable = horizon.withLock { $0.observe(listing, prepared: prepared) }
            if usable >= taken { return usable }
        }
        return usable
    }

    /// The horizon of a log still held in one table on the coordinator (`LogLayout.coordinator`),
    /// read in the caller's transaction: its appends may be distributed already.
    func coordinatorHorizon(on coordinator: Connection, patience: Patience) throws -> UInt64 {
        let r = try coordinator.query(CitusSQL.coordinatorHorizon)
        guard let taken = r.string(0, 0).flatMap(UInt64.init) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "the coordinator's snapshot xmin is not a number")
        }
        var nodes = Set<WorkerNode>()
        for row in 0..<r.rowCount {
            if let host = r.string(row, 1), let port = r.int64(row, 2) { nodes.insert(WorkerNode(host: host, port: Int(port))) }
        }
        return nodes.isEmpty ? taken : try usableHorizon(taken: taken, nodes: nodes, patience: patience)
    }

    /// The next events of each cursor past its checkpoint and below the horizon, at most `limit`
    /// per cursor: one result per worker, rows cursor by cursor in log order, with the columns
    /// of `ProjectorSQL.nextEvents` and then the cursor (`LogShard.cursor`); and the horizon
    /// of the coordinator-stamped rows they were read below (0: none yet).
    func nextEvents(_ shards: LogShards, limit: Int) throws -> (results: [QueryResult], below: UInt64) {
        let below = try usableHorizon(taken: shards.taken, nodes: shards.nodes, patience: .step)
        let results = try onEachNode(byNode(shards.all)) { [self] _, shards, c in
            let statement = prepared(CitusSQL.nextEvents(shards, limit: limit))
            return try c.transaction(begin: CitusSQL.beginRead) {
                try c.query(statement, CitusSQL.checkpoints(of: shards) + [.text(String(below))], binaryResults: true)
            }
        }
        return (results, below)
    }

    /// Records, in a step's transaction, that every coordinator-stamped row of the shards in
    /// `cursors` below `horizon` is projected (the step read fewer rows there than it could
    /// take), where an append's mark lies between a shard's last horizon and this one, or where
    /// a shard has none yet (`CitusSQL.drained`); then, at most once a minute, forgets the marks
    /// of connections that are gone once there are many, while no rebuild runs. Only the
    /// projector of the live projections records: a rebuild's steps project its own.
    func recordDrained(_ cursors: [Int64], below horizon: UInt64, on coordinator: Connection) throws {
        guard horizon > 0, !cursors.isEmpty else { return }
        var ids = BinaryArray(.int8)
        for cursor in cursors { ids.append(cursor) }
        let marks = try coordinator.query(CitusSQL.drained, [ids.parameter, .text(String(horizon))]).int64(0, 0) ?? 0
        guard marks > CitusSQL.marksKept, pruneDue(),
              try coordinator.query(CitusSQL.lockAgainstRebuilds, [RebuildSQL.lock]).bool(0, 0) == true else { return }
        try coordinator.execute(CitusSQL.pruneMarks)
    }

    /// Whether a minute has passed since this process last tried to prune the marks (it counts
    /// as trying from now on).
    private func pruneDue() -> Bool {
        let now = ContinuousClock.now
        return lastPrune.withLock { last in
            if let last, now - last < CitusSQL.pruneInterval { return false }
            last = now
            return true
        }
    }

    /// Whether every event committed before the call is projected, asked of the coordinator
    /// alone: every shard has a drained horizon, none has worker-stamped rows waiting, no
    /// append's mark is at or past the lowest horizon, and the groups' inbox is empty. `false` says only that the workers must be
    /// asked: also on a standby (its marks and horizons may be replayed before the rows they
    /// speak of) and on projections swapped in by a rebuild of a version without the horizons.
    static func caughtUpByMarks(on coordinator: Connection) throws -> Bool {
        let answer: QueryResult
        do {
            answer = try coordinator.query(CitusSQL.caughtUp, [])
        } catch {
            if error.state == .undefinedColumn || error.state == .undefinedTable { return false }
            throw error
        }
        return answer.bool(0, 0) ?? false
    }

    /// The newest committed row of each cursor that has one.
    func heads(_ shards: LogShards) throws -> [Int64: LogPosition] {
        var heads: [Int64: LogPosition] = [:]
        for r in try onEachNode(byNode(shards.all), { [self] _, shards, c in try c.query(prepared(CitusSQL.heads(shards)), []) }) {
            for row in 0..<r.rowCount {
                guard let id = r.int64(row, 0), let tx = r.string(row, 1), let seq = r.string(row, 2) else { continue }
                heads[id] = LogPosition(tx: tx, seq: seq)
            }
        }
        return heads
    }

    /// What waits behind each cursor's checkpoint (counted up to `cap` per cursor). Readable
    /// means below the horizon of the read that found the cursors: a hint for a reader deciding
    /// whether to wait, not the projector's rule.
    func backlog(_ shards: LogShards, cap: Int, networks: NetworkScope? = nil) throws -> [Int64: ShardBacklog] {
        Self.backlog(of: try onEachNode(byNode(shards.all), backlogRead(shards, cap: cap, networks: networks)))
    }

    /// `backlog` read on the workers while `meanwhile` runs on the calling thread (a statement on
    /// the coordinator), so that the two cost the longer of them, not their sum. The backlog's
    /// failure is handed back, not thrown: the caller decides what a pass that failed means.
    func backlog<U>(_ shards: LogShards, cap: Int,
                    meanwhile: () throws -> U) throws -> (backlog: Result<[Int64: ShardBacklog], any Error>, meanwhile: U) {
        let (results, value) = try onEachNode(byNode(shards.all), backlogRead(shards, cap: cap, networks: nil), meanwhile: meanwhile)
        return (results.map(Self.backlog(of:)), value)
    }

    /// One worker's read of `backlog`: its cursors' rows past their checkpoints.
    private func backlogRead(_ shards: LogShards, cap: Int,
                             networks: NetworkScope?) -> @Sendable (WorkerNode, [LogShard], Connection) throws -> QueryResult {
        { [self] _, nodeShards, c in
            let statement = prepared(CitusSQL.backlog(nodeShards, cap: cap, ofNetworks: networks != nil))
            let parameters = CitusSQL.checkpoints(of: nodeShards) + [.text(String(shards.taken))]
                + (networks.map { [$0.arrayParameter] } ?? [])
            return try c.transaction(begin: CitusSQL.beginRead) {
                try c.query(statement, parameters)
            }
        }
    }

    /// The workers' answers to `backlogRead`, by cursor.
    private static func backlog(of results: [QueryResult]) -> [Int64: ShardBacklog] {
        var backlog: [Int64: ShardBacklog] = [:]
        for r in results {
            for row in 0..<r.rowCount {
                guard let id = r.int64(row, 0) else { continue }
                backlog[id] = ShardBacklog(events: Int(r.int64(row, 1) ?? 0), seconds: r.string(row, 2).flatMap(Double.init),
                                           readable: r.bool(row, 3) ?? false)
            }
        }
        return backlog
    }

    /// Moves the checkpoints of the cursors a step read to the last row each gave, in the
    /// step's transaction; retires the worker-stamped cursors once their day is past and none
    /// of their rows waits.
    /// Records the newest receipt projected from each shard (`ClientMinutes.forgetBehindEveryShard`).
    /// `retires` false (a projector of one group of shards): the retirement, which writes
    /// every shard's row, is left to a projector of the whole log.
    func advance(_ shards: LogShards, to ends: [Int64: LogBatch.ShardEnd], retires: Bool, on coordinator: Connection) throws {
        var ids = BinaryArray(.int8), txs = BinaryArray(.text), seqs = BinaryArray(.int8), receipts = BinaryArray(.timestamptz)
        for (cursor, last) in ends {
            ids.append(cursor)
            txs.append(String(last.tx))
            seqs.append(last.seq)
            receipts.append(microsecondsSince1970: last.newestReceipt.microseconds)
        }
        if ids.count > 0 {
            try coordinator.query(CitusSQL.checkpoints, [ids.parameter, txs.parameter, seqs.parameter])
            try coordinator.query(CitusSQL.projectedReceipts, [ids.parameter, receipts.parameter])
        }
        guard retires else { return }
        let workerStamped = shards.all.filter { $0.cursor < 0 }
        guard shards.workerOrderDue, !workerStamped.isEmpty, !workerStamped.contains(where: { ends[$0.cursor] != nil }) else { return }
        let waiting = try backlog(LogShards(all: workerStamped, taken: shards.taken, workerOrderDue: true), cap: 1)
        // Not while a rebuild runs: its own checkpoints of the worker-stamped rows would be
        // ignored after its swap, before its catch-up read past them.
        guard waiting.values.allSatisfy({ $0.events == 0 }),
              try coordinator.query(CitusSQL.lockAgainstRebuilds, [RebuildSQL.lock]).bool(0, 0) == true else { return }
        for statement in CitusSQL.retireWorkerOrder { try coordinator.execute(statement) }
    }

    /// Runs `body` on a connection to `node` (for a rebuild's copy of a shard).
    func withWorker<T>(_ node: WorkerNode, _ body: (Connection) throws -> T) throws -> T {
        try workers.with(node, body)
    }

    /// The statement named for `sql` (a name per text, made the first time it is asked).
    private func prepared(_ sql: String) -> PreparedStatement {
        statements.withLock { known in
            if let statement = known[sql] { return statement }
            let statement = PreparedStatement(name: "tracker_citus_\(known.count)", sql: sql)
            known[sql] = statement
            return statement
        }
    }

    /// The cursors grouped by worker, in a stable order.
    func byNode(_ shards: [LogShard]) -> [(WorkerNode, [LogShard])] {
        Dictionary(grouping: shards, by: \.node).sorted { $0.key.description < $1.key.description }.map { ($0.key, $0.value) }
    }

    /// Runs `body` on a connection to each node at once (the first on the calling thread, the
    /// others on the log's threads) and returns the results in the nodes' order: a read costs
    /// the slowest worker, not the sum. The first error is thrown once every read ended.
    func onEachNode<T>(_ groups: [(WorkerNode, [LogShard])],
                       _ body: @escaping @Sendable (WorkerNode, [LogShard], Connection) throws -> T) throws -> [T] {
        let run = reader(groups, body)
        guard groups.count > 1 else { return try groups.indices.map { try run($0).value.get() } }
        let slots = submit(groups.indices.dropFirst(), of: groups.count, run)
        slots.fill(0, run(0))
        return try slots.waitForAll().map { try $0.value.get() }
    }

    /// `onEachNode` with every node read on the log's threads while `meanwhile` runs on the
    /// calling thread. `meanwhile`'s error is thrown; the nodes' (the first) is handed back.
    func onEachNode<T, U>(_ groups: [(WorkerNode, [LogShard])],
                          _ body: @escaping @Sendable (WorkerNode, [LogShard], Connection) throws -> T,
                          meanwhile: () throws -> U) throws -> (Result<[T], any Error>, U) {
        let slots = submit(groups.indices, of: groups.count, reader(groups, body))
        let value = Result { try meanwhile() }
        let read = slots.waitForAll()
        return (Result { try read.map { try $0.value.get() } }, try value.get())
    }

    /// `body` on a connection to the node of `groups[index]`, its result or error.
    private func reader<T>(_ groups: [(WorkerNode, [LogShard])],
                           _ body: @escaping @Sendable (WorkerNode, [LogShard], Connection) throws -> T) -> @Sendable (Int) -> Handed<T> {
        { [workers] index in
            let (node, shards) = groups[index]
            return Handed(Result { try workers.with(node) { try body(node, shards, $0) } })
        }
    }

    /// The reads of `indices` submitted to the log's threads, each into its slot of `count`.
    private func submit<T>(_ indices: some Sequence<Int>, of count: Int, _ run: @escaping @Sendable (Int) -> Handed<T>) -> HandedSlots<T> {
        let slots = HandedSlots<T>(count: count)
        for index in indices {
            threads.submit { _ in slots.fill(index, run(index)) }
        }
        return slots
    }
}

/// A result handed from the thread that produced it to the one that asked, once.
/// `@unchecked Sendable`: after the hand-over only the receiving thread touches the value.
struct Handed<T>: @unchecked Sendable {
    var value: Result<T, any Error>
    init(_ value: Result<T, any Error>) { self.value = value }
}

/// One slot per node of a read done at once on several threads.
/// `@unchecked Sendable`: each slot is written by one thread, under the lock, and read only
/// after every slot was written (`waitForAll`).
private final class HandedSlots<T>: @unchecked Sendable {
    private let filled: ConditionLock<Int>
    private var slots: [Handed<T>?]
    private var count = 0

    init(count: Int) {
        filled = ConditionLock(value: 0)
        slots = Array(repeating: nil, count: count)
    }

    func fill(_ index: Int, _ value: Handed<T>) {
        filled.lock()
        slots[index] = value
        count += 1
        filled.unlock(withValue: count)
    }

    func waitForAll() -> [Handed<T>] {
        filled.lock(whenValue: slots.count)
        defer { filled.unlock() }
        return slots.map { $0! }
    }
}

/// Connections to the workers, made as needed and kept for the next read. They are used only
/// inside a closure that already holds a coordinator connection of a pool, so there are never
/// more per worker than the pool has connections.
final class WorkerConnections: Sendable {
    private let conninfo: String
    private let idle = Mutex<[WorkerNode: [Kept]]>([:])

    /// A connection between two uses; only one thread holds it at a time.
    private final class Kept: @unchecked Sendable {
        let connection: Connection
        init(_ connection: Connection) { self.connection = connection }
    }

    init(conninfo: String) {
        self.conninfo = conninfo
    }

    func with<T>(_ node: WorkerNode, _ body: (Connection) throws -> T) throws -> T {
        var kept = idle.withLock { $0[node]?.popLast() }
        if let k = kept, !k.connection.isHealthy {
            k.connection.close()
            kept = nil
        }
        let connection = try kept?.connection
            ?? Connection.open(ConnectionString.replacingHost(of: conninfo, host: node.host, port: node.port))
        // Whatever the body did, the connection leaves no transaction open and is kept only
        // while it is healthy.
        defer {
            connection.rollbackIfInTransaction()
            if connection.isHealthy {
                let k = Kept(connection)
                idle.withLock { $0[node, default: []].append(k) }
            } else {
                connection.close()
            }
        }
        return try body(connection)
    }
}

enum CitusSQL {
    /// Columns: 0 the citus extension is installed, 1 the log is distributed (the Citus layout
    /// made `log_shards`).
    static let layout = """
        SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus'), to_regclass('log_shards') IS NOT NULL
        """

    /// Columns: 0 shard id, 1 its table, 2-3 its worker, 4-5 checkpoint of its coordinator-stamped
    /// rows, 6-7 checkpoint of its worker-stamped rows (NULL: none wait), 8 its number of
    /// placements, 9 the day coordinator stamps begin (NULL: every row has one), 10 whether the
    /// shard is on the worker that stamped its older rows, 11 the coordinator's snapshot xmin,
    /// 12 whether the worker-stamped rows' day is more than an hour past, 13-15 the entries of
    /// the groups' inbox and their lowest and highest sequence numbers (NULL: none).
    static let shards = """
        SELECT l.shard_id, shard_name('events'::regclass, l.shard_id), n.nodename, n.nodeport,
               l.checkpoint_tx::text, l.checkpoint_seq, l.worker_checkpoint_tx::text, l.worker_checkpoint_seq,
               count(*) OVER (PARTITION BY l.shard_id),
               CASE WHEN o.coordinator_from > '-infinity' THEN to_char(o.coordinator_from, 'YYYY-MM-DD') END,
               p.groupid = l.node_group, pg_snapshot_xmin(pg_current_snapshot())::text,
               now() >= (o.coordinator_from::timestamp AT TIME ZONE 'UTC') + interval '1 hour',
               i.entries, i.low, i.high
        FROM log_shards l
        CROSS JOIN log_order o
        CROSS JOIN (SELECT count(*) AS entries, min(seq) AS low, max(seq) AS high FROM projection_inbox) i
        JOIN pg_dist_placement p ON p.shardid = l.shard_id
        JOIN pg_dist_node n ON n.groupid = p.groupid
        ORDER BY l.shard_id
        """

    /// The transactions prepared on a node (two-phase commits not yet committed or rolled back).
    static let prepared = "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"

    /// Columns: 0 the coordinator's snapshot xmin, then one row per worker: 1 host, 2 port
    /// (NULL when there is none).
    static let coordinatorHorizon = """
        SELECT pg_snapshot_xmin(pg_current_snapshot())::text, n.nodename, n.nodeport
        FROM (SELECT 1) one
        LEFT JOIN pg_dist_node n ON n.isactive AND n.noderole = 'primary' AND n.groupid <> 0
        """

    /// `ProjectorSQL.nextEvents` below a horizon given as $4 (`LogLayout.coordinator`).
    static let coordinatorNextEvents = """
        SELECT \(AdEventColumn.list), tx, seq
        FROM events
        WHERE (tx, seq) > ($1::xid8, $2::bigint)
          AND tx < $4::xid8
        ORDER BY events.tx, events.seq
        LIMIT $3::int
        """

    /// The projector's planner settings, for reads on a worker, the generic plan from the
    /// first run of a prepared read (a custom plan would plan the union again on each of the
    /// first five runs, for the same plan), and the end of a read whose reader froze
    /// (`ProjectorSQL.frozenStepLimit`).
    static let readSettings = ProjectorSQL.plannerSettings + "; SET LOCAL plan_cache_mode = force_generic_plan; "
        + ProjectorSQL.frozenStepLimit

    /// A read's transaction begun with `readSettings` in the same round trip to the worker.
    static let beginRead = "BEGIN; " + readSettings

    /// The checkpoint of the cursor at `index` in a read's list: its two parameters.
    private static func position(_ index: Int) -> String {
        "($\(2 * index + 1)::xid8, $\(2 * index + 2)::bigint)"
    }

    /// The parameters of `nextEvents` and `backlog` before the horizon: each cursor's
    /// checkpoint, in the list's order.
    static func checkpoints(of shards: [LogShard]) -> [Parameter] {
        shards.flatMap { [Parameter.text($0.checkpoint.tx), .text($0.checkpoint.seq)] }
    }

    /// The rows of a cursor's order: the receipts it covers.
    private static func receipts(_ shard: LogShard) -> String {
        switch shard.order {
        case .coordinator(let from?): " AND received_at >= '\(from) 00:00:00+00'::timestamptz"
        case .coordinator(nil): ""
        case .worker(let before): " AND received_at < '\(before) 00:00:00+00'::timestamptz"
        }
    }

    /// Below the horizon of a cursor's order: the coordinator's (the parameter after the
    /// checkpoints), or for worker-stamped rows their worker's snapshot xmin (naming the
    /// parameter all the same: a statement must use every parameter it is given).
    private static func horizon(_ shard: LogShard, parameter: Int) -> String {
        if case .worker = shard.order { return "pg_snapshot_xmin(pg_current_snapshot()) AND $\(parameter)::xid8 IS NOT NULL" }
        return "$\(parameter)::xid8"
    }

    static func nextEvents(_ shards: [LogShard], limit: Int) -> String {
        shards.enumerated().map { index, s in
            """
            (SELECT \(AdEventColumn.list), tx, seq, \(s.cursor)::bigint FROM \(s.table)
             WHERE (tx, seq) > \(position(index)) AND tx < \(horizon(s, parameter: 2 * shards.count + 1))\(receipts(s))
             ORDER BY tx, seq LIMIT \(limit))
            """
        }.joined(separator: " UNION ALL ")
    }

    /// Columns: 0 cursor, 1 tx, 2 seq of the cursor's newest row.
    static func heads(_ shards: [LogShard]) -> String {
        shards.map { s in
            // Output names that are not the table's: ORDER BY tx must sort the xid8, not its text.
            """
            (SELECT \(s.cursor)::bigint AS shard, tx::text AS head_tx, seq AS head_seq FROM \(s.table)
             WHERE true\(receipts(s)) ORDER BY tx DESC, seq DESC LIMIT 1)
            """
        }.joined(separator: " UNION ALL ")
    }

    /// Columns: 0 cursor, 1 rows past the checkpoint (up to `cap`), 2 seconds since the oldest
    /// of them was received, 3 whether one is below the horizon (the parameter after the
    /// checkpoints). `ofNetworks`: counted over the ad units of the networks given after it only.
    static func backlog(_ shards: [LogShard], cap: Int, ofNetworks: Bool = false) -> String {
        let networks = "$\(2 * shards.count + 2)::text[]"
        return shards.enumerated().map { index, s in
            """
            (SELECT \(s.cursor)::bigint, count(*), (extract(epoch FROM now() - min(received_at)))::float8::text,
                    coalesce(bool_or(tx < \(horizon(s, parameter: 2 * shards.count + 1))), false)
             FROM (SELECT tx, received_at, ad_unit FROM \(s.table) WHERE (tx, seq) > \(position(index))\(receipts(s))
                   ORDER BY tx, seq LIMIT \(cap)) pending\(ofNetworks ? " WHERE split_part(ad_unit, '/', 2) = ANY(\(networks))" : ""))
            """
        }.joined(separator: " UNION ALL ")
    }

    /// A cursor's rows below `horizon` (the coordinator's; a worker-stamped cursor's is its
    /// worker's, given by the caller), for a rebuild's binary copy.
    static func copy(_ shard: LogShard, below horizon: UInt64) -> String {
        """
        COPY (SELECT \(AdEventColumn.list) FROM \(shard.table)
              WHERE tx < '\(horizon)'::xid8\(receipts(shard))) TO STDOUT (FORMAT binary)
        """
    }

    /// Rows of some cursors of one worker below their horizons (`horizons` by cursor), the
    /// columns in `columns`, for a rebuild's reads of the recent log.
    static func rows(of shards: [LogShard], columns: String, below horizons: [Int64: UInt64], where condition: String) -> String {
        shards.map { s in
            "SELECT \(columns) FROM \(s.table) WHERE tx < '\(horizons[s.cursor] ?? 0)'::xid8\(receipts(s)) AND \(condition)"
        }.joined(separator: " UNION ALL ")
    }

    /// The positions a step or a rebuild gives its cursors, by shard: $1 cursors (a shard's id,
    /// negated for its worker-stamped rows), $2 tx (text), $3 seq. NULL where a shard's cursor
    /// is not among them.
    static let cursorPositions = """
        SELECT abs(c.cursor) AS shard,
               (array_agg(c.tx::xid8) FILTER (WHERE c.cursor > 0))[1] AS tx,
               (array_agg(c.seq) FILTER (WHERE c.cursor > 0))[1] AS seq,
               (array_agg(c.tx::xid8) FILTER (WHERE c.cursor < 0))[1] AS worker_tx,
               (array_agg(c.seq) FILTER (WHERE c.cursor < 0))[1] AS worker_seq
        FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS c(cursor, tx, seq)
        GROUP BY 1
        """

    /// Moves the checkpoints of the cursors a step read (`cursorPositions`' parameters).
    static let checkpoints = """
        UPDATE log_shards l
        SET checkpoint_tx = coalesce(u.tx, l.checkpoint_tx), checkpoint_seq = coalesce(u.seq, l.checkpoint_seq),
            worker_checkpoint_tx = coalesce(u.worker_tx, l.worker_checkpoint_tx),
            worker_checkpoint_seq = coalesce(u.worker_seq, l.worker_checkpoint_seq)
        FROM (\(cursorPositions)) u
        WHERE l.shard_id = u.shard
        """

    /// The newest receipt projected from each shard: $1 cursors, $2 receipts.
    static let projectedReceipts = """
        UPDATE log_shards l SET projected_receipt = greatest(l.projected_receipt, u.receipt)
        FROM (SELECT abs(c) AS shard, max(r) AS receipt FROM unnest($1::bigint[], $2::timestamptz[]) AS x(c, r) GROUP BY 1) u
        WHERE l.shard_id = u.shard
        """

    /// Every worker-stamped row is projected: from now on every row is read in the
    /// coordinator's order.
    static let retireWorkerOrder = [
        "UPDATE log_shards SET worker_checkpoint_tx = NULL, worker_checkpoint_seq = NULL",
        "UPDATE log_order SET coordinator_from = '-infinity'",
    ]

    /// Sets `drained_below` to $2 on the shards $1 where a mark lies between it and $2, or
    /// where it has none yet once $2 is past every append that did not mark; answers how many
    /// marks there are. (A data-modifying `WITH` runs whether or not the query reads it.)
    ///
    /// Appends mark once the log is distributed (`tracker_mark_append` is replaced in the
    /// layout's transaction), after their rows: one that found it not marking took its
    /// transaction id before that commit. The first step under the projector's lock comes after
    /// it and writes, as the mark of `backend` 0 (no connection's), its snapshot's xmax: every
    /// append that did not mark is below it. A shard gets its first horizon only past it.
    /// Prepared once per connection: every step of the live projector runs it.
    static let drained = PreparedStatement(name: "tracker_citus_drained", sql: """
        WITH since AS (
            INSERT INTO log_marks (backend, tx) VALUES (0, pg_snapshot_xmax(pg_current_snapshot()))
            ON CONFLICT (backend) DO NOTHING
        ), advanced AS (
            UPDATE log_shards l SET drained_below = $2::xid8
            WHERE l.shard_id = ANY($1::bigint[])
              AND CASE WHEN l.drained_below IS NULL
                       THEN $2::xid8 > (SELECT tx FROM log_marks WHERE backend = 0)
                       ELSE l.drained_below < $2::xid8
                            AND EXISTS (SELECT 1 FROM log_marks m WHERE m.tx >= l.drained_below AND m.tx < $2::xid8) END
        )
        SELECT count(*) FROM log_marks
        """)

    /// The marks kept before those of connections that are gone are deleted: one per writer
    /// connection of every tracker, and a few left by connections closed since.
    static let marksKept = 64
    /// How often a projector looks for marks to prune while there are more than `marksKept`
    /// (with many writer connections there always are).
    static let pruneInterval = Duration.seconds(60)

    /// The marks of connections that are gone, below every shard's drained horizon. A
    /// connection that starts later under a pruned one's pid writes a new row with its first
    /// append; one that took the pid in the meantime and appended keeps its row, whose mark is
    /// then past the horizon.
    static let pruneMarks = """
        DELETE FROM log_marks m
        WHERE m.backend <> 0
          AND m.tx < (SELECT min(drained_below) FROM log_shards HAVING bool_and(drained_below IS NOT NULL))
          AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = m.backend)
        """

    /// `CitusLog.caughtUpByMarks`. Prepared once per connection: it is asked by every report.
    static let caughtUp = PreparedStatement(name: "tracker_citus_caught_up", sql: """
        SELECT bool_and(l.drained_below IS NOT NULL AND l.worker_checkpoint_tx IS NULL)
               AND NOT EXISTS (SELECT 1 FROM log_marks m WHERE m.tx >= (SELECT min(drained_below) FROM log_shards))
               AND NOT EXISTS (SELECT 1 FROM projection_inbox)
               AND NOT pg_is_in_recovery()
        FROM log_shards l
        """)

    /// Locks the checkpoints of the shards $1 for a projector of a group of them, in one order.
    static let lockShards = "SELECT shard_id FROM log_shards WHERE shard_id = ANY($1::bigint[]) ORDER BY shard_id FOR UPDATE"

    /// Keeps a rebuild from starting until the caller's transaction ends; false when one runs.
    static let lockAgainstRebuilds = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
}

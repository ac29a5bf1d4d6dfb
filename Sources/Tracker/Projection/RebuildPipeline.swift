#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOConcurrencyHelpers
import NIOPosix
import Synchronization

/// The rebuild's projecting phase on every core: threads of its own each read a spill file
/// back, run `AdContribution` over its ads and encode their packed states as `COPY` rows, a
/// few files ahead of the `COPY` that sends them; `take` hands the files out in order.
///
/// Files are independent (each ad is in exactly one): each thread adds its ads' contributions
/// to `sum` every `rowsPerWrite` rows, so that distinct ad units and asset keys do not grow
/// what a file holds. At most `lookahead` files are in memory, done or in progress: the first
/// ones are queued at the start, and each file taken queues the one `lookahead` places after it.
final class RebuildPipeline: @unchecked Sendable {
    struct Projected {
        /// `COPY … (FORMAT binary)` rows of `ad_state`: the file's ads and their packed states.
        var rows: [UInt8]
        var events: Int
    }

    // @unchecked Sendable: `buckets` is only read (each file by one thread: a file is queued
    // once), and the rest is synchronized by the mutexes and condition locks.
    private let buckets: RebuildBuckets
    private let rules: AdContribution
    private let sum: RebuildSum
    private let rowsPerWrite: Int
    private let lookahead: Int
    private let threads: NIOThreadPool
    private let results = Mutex<[Int: Result<Projected, any Error>]>([:])
    /// One per file, true once its result is in `results`; `take` waits on it.
    private let ready: [ConditionLock<Bool>]
    /// The tables of strings the threads decode with, one per file in progress at most, kept
    /// from file to file (they intern the strings that recur across ads).
    private let stringTables = Mutex<[StringTable]>([])
    private let stopped = Atomic<Bool>(false)

    init(buckets: RebuildBuckets, rules: AdContribution, sum: RebuildSum, rowsPerWrite: Int = Projector.defaultRowsPerWrite,
         workers: Int = RebuildPipeline.cores, lookahead: Int? = nil) {
        self.buckets = buckets
        self.rules = rules
        self.sum = sum
        self.rowsPerWrite = max(1, rowsPerWrite)
        let workers = max(1, workers)
        self.lookahead = max(1, lookahead ?? workers + 1)
        ready = (0..<buckets.count).map { _ in ConditionLock(value: false) }
        threads = NIOThreadPool(numberOfThreads: workers)
        threads.start()
        for index in 0..<min(self.lookahead, buckets.count) { queue(index) }
    }

    deinit {
        threads.shutdownGracefully { _ in }
    }

    /// The processors online, at most 4: each thread adds a spill file's ads and rows to the
    /// rebuild's memory (workers + 2 files at most), and the COPY into `ad_state` and
    /// PostgreSQL's side of it need a core too.
    static var cores: Int { max(1, min(4, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))) }

    /// File `index` projected; files must be taken in order, each once, and none after `stop()`
    /// (a file dropped by the stop never becomes ready). Blocks until it is.
    func take(_ index: Int) -> Result<Projected, any Error> {
        ready[index].lock(whenValue: true)
        ready[index].unlock()
        let result = results.withLock { $0.removeValue(forKey: index)! }
        if index + lookahead < buckets.count { queue(index + lookahead) }
        return result
    }

    /// Stops the threads after the files they are on, once the `COPY` is over (early or not);
    /// files queued but not started are dropped.
    func stop() {
        stopped.store(true, ordering: .relaxed)
        threads.shutdownGracefully { _ in }
    }

    private func queue(_ index: Int) {
        threads.submit { state in
            guard state == .active, !self.stopped.load(ordering: .relaxed) else { return }
            var strings = self.stringTables.withLock { $0.popLast() } ?? StringTable()
            let result = Result { try self.project(index, strings: &strings) }
            self.stringTables.withLock { $0.append(strings) }
            self.results.withLock { $0[index] = result }
            self.ready[index].lock()
            self.ready[index].unlock(withValue: true)
        }
    }

    private func project(_ index: Int, strings: inout StringTable) throws -> Projected {
        let ads = try buckets.ads(in: index, strings: &strings)
        var rows = BinaryCopyRows(capacity: ads.count * 80, header: false)
        var contribution = Contribution()
        var state: [UInt8] = []
        var events = 0
        // In the order of the ads' first events: ads of the same hours follow one another, so
        // `contribution` sums their rows before it is handed on, rather than hand on each ad's.
        let ordered = ads.map { (ad: $0.key, events: $0.value, first: $0.value.lazy.map(\.correctedAt).min()!) }
            .sorted { $0.first < $1.first }
        for (ad, adEvents, _) in ordered {
            rules.accumulate(adEvents, into: &contribution)
            if contribution.rows.count >= rowsPerWrite {
                try sum.add(contribution)
                contribution = Contribution()
            }
            state.removeAll(keepingCapacity: true)
            AdState.encode(adEvents, into: &state)
            rows.beginRow(fields: 2)
            rows.append(ad)
            rows.append(bytes: state)
            events += adEvents.count
        }
        try sum.add(contribution)
        return Projected(rows: rows.bytes, events: events)
    }
}

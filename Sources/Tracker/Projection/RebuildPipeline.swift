#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Synchronization

/// The rebuild's projecting phase on every core: worker threads each read a spill file back,
/// run `AdContribution` over its ads and encode their packed states as `COPY` rows, a few
/// files ahead of the `COPY` that sends them; `take` hands the files out in order.
///
/// One thread did all of it before, and it bounded the rebuild (at 51 M events the tracker
/// used 148 of the 188 s on one core while PostgreSQL waited). Files are independent (each ad
/// is in exactly one), so each file gets its own `Contribution`, summed by the caller, and each
/// worker its own `StringTable`. At most `lookahead` files are in memory, done or in progress.
final class RebuildPipeline: @unchecked Sendable {
    struct Projected {
        /// `COPY … (FORMAT binary)` rows of `ad_state`: the file's ads and their packed states.
        var rows: [UInt8]
        var contribution: Contribution
        var events: Int
    }

    // @unchecked Sendable: `buckets` is only read (each file by one worker at a time: an
    // index is handed out once), and the rest is synchronized by the mutex and semaphores.
    private let buckets: RebuildBuckets
    private let rules: AdContribution
    private let workers: Int
    private let results = Mutex<[Int: Result<Projected, any Error>]>([:])
    private let ready: [DispatchSemaphore]
    /// Places for files in memory; a worker takes one before it starts a file, `take` gives it back.
    private let window: DispatchSemaphore
    private let next = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    init(buckets: RebuildBuckets, rules: AdContribution, workers: Int = RebuildPipeline.cores, lookahead: Int? = nil) {
        self.buckets = buckets
        self.rules = rules
        self.workers = max(1, workers)
        ready = (0..<buckets.count).map { _ in DispatchSemaphore(value: 0) }
        // Made empty and filled: libdispatch aborts when a semaphore is released below the
        // value it was made with, which files projected but never taken (a COPY that ended
        // early) would leave it at.
        window = DispatchSemaphore(value: 0)
        for _ in 0..<(lookahead ?? self.workers + 1) { window.signal() }
        for _ in 0..<self.workers {
            DispatchQueue.global().async { self.work() }
        }
    }

    /// The processors online, at most 4: each worker adds a spill file's ads and rows to the
    /// rebuild's memory (workers + 2 files at most), and the COPY into `ad_state` and
    /// PostgreSQL's side of it need a core too.
    static var cores: Int { max(1, min(4, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))) }

    /// File `index` projected; files must be taken in order, each once.
    func take(_ index: Int) -> Result<Projected, any Error> {
        ready[index].wait()
        let result = results.withLock { $0.removeValue(forKey: index)! }
        window.signal()
        return result
    }

    /// Stops the workers after the files they are on (when the `COPY` ended early).
    func stop() {
        stopped.store(true, ordering: .relaxed)
        for _ in 0..<workers { window.signal() }
    }

    private func work() {
        var strings = StringTable()
        while true {
            window.wait()
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < buckets.count, !stopped.load(ordering: .relaxed) else {
                window.signal()
                return
            }
            let result = Result { try project(index, strings: &strings) }
            results.withLock { $0[index] = result }
            ready[index].signal()
        }
    }

    private func project(_ index: Int, strings: inout StringTable) throws -> Projected {
        let ads = try buckets.ads(in: index, strings: &strings)
        var rows = BinaryCopyRows(capacity: ads.count * 80, header: false)
        var contribution = Contribution()
        var state: [UInt8] = []
        var events = 0
        for (ad, adEvents) in ads {
            rules.accumulate(adEvents, into: &contribution)
            state.removeAll(keepingCapacity: true)
            AdState.encode(adEvents, into: &state)
            rows.beginRow(fields: 2)
            rows.append(ad)
            rows.append(bytes: state)
            events += adEvents.count
        }
        return Projected(rows: rows.bytes, contribution: contribution, events: events)
    }
}

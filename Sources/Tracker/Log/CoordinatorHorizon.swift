/// The readers' horizon of a log on a Citus coordinator: a transaction id below which every row
/// of the log is final on every node, wherever its shard lives.
///
/// Rows carry the coordinator's transaction id (`sql/citus/distribute.sql`). On one node, a row
/// below the snapshot's xmin can no longer appear. On Citus a two-phase transaction's rows
/// become visible on a worker only at `COMMIT PREPARED`, which Citus sends after the
/// coordinator committed, so the coordinator's xmin `H` alone is not enough. The rule:
/// 1. take `H` on the coordinator;
/// 2. after that, list the transactions prepared on every worker (`G`);
/// 3. `H` is usable once a later listing shows none of `G` still prepared.
///
/// A transaction below `H` ended on the coordinator before step 1; if it was two-phase it had
/// prepared on every worker before that, so at step 2 each of its parts is committed, rolled
/// back, or in `G`; and nothing below `H` can prepare after step 1. When `G` has drained, every
/// row stamped below `H` is visible on every worker.
///
/// Listings may run on several threads at once: a listing counts toward draining only if it
/// began after the listing that made `G` was observed (`Listing` carries when it began).
struct CoordinatorHorizon: Sendable {
    /// A listing of the workers' prepared transactions, begun after its horizon was taken.
    struct Listing: Sendable, Hashable {
        fileprivate var ticket: UInt64
        /// The coordinator's horizon taken before the listing began.
        var taken: UInt64
    }

    /// A horizon waiting for the transactions prepared when it was listed.
    private struct Pending: Sendable {
        var horizon: UInt64
        var prepared: Set<String>
        /// Listings with a ticket above this began after this one was observed.
        var observedAt: UInt64
    }

    /// The newest horizon known usable (0: none yet, every row is above it).
    private(set) var usable: UInt64 = 0
    private var pending: Pending?
    private var tickets: UInt64 = 0

    /// Starts a listing for horizon `taken`, read on the coordinator just before.
    mutating func beginListing(after taken: UInt64) -> Listing {
        tickets += 1
        return Listing(ticket: tickets, taken: taken)
    }

    /// The outcome of a listing: `prepared` names each worker's prepared transactions
    /// (`node/gid`). Returns the usable horizon, which never goes back.
    @discardableResult
    mutating func observe(_ listing: Listing, prepared: Set<String>) -> UInt64 {
        if let waiting = pending, listing.ticket > waiting.observedAt, waiting.prepared.isDisjoint(with: prepared) {
            usable = max(usable, waiting.horizon)
            pending = nil
        }
        if prepared.isEmpty {
            usable = max(usable, listing.taken)
            pending = nil
        } else if pending == nil, listing.taken > usable {
            // A horizon still waiting keeps its place: its transactions are older and end sooner.
            pending = Pending(horizon: listing.taken, prepared: prepared, observedAt: tickets)
        }
        return usable
    }
}

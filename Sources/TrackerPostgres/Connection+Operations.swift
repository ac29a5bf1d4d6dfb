/// PostgreSQL's own operations, typed, so the tracker's code does not write their SQL: advisory
/// locks by name, a server-side pause, and the transaction horizon of the current snapshot.
extension Connection {
    /// Waits for the session-level advisory lock `name` (hashed by PostgreSQL's `hashtext`).
    public func lock(_ name: String) throws(DatabaseError) {
        _ = try query("SELECT pg_advisory_lock(hashtext($1))", [name])
    }

    /// Takes the session-level advisory lock `name` if it is free; `false` when another session holds it.
    public func tryLock(_ name: String) throws(DatabaseError) -> Bool {
        try query("SELECT pg_try_advisory_lock(hashtext($1))", [name]).bool(0, 0) == true
    }

    /// Releases a session-level advisory lock taken by `lock` or `tryLock`.
    public func unlock(_ name: String) throws(DatabaseError) {
        _ = try query("SELECT pg_advisory_unlock(hashtext($1))", [name])
    }

    /// Waits for the advisory lock `name` until the current transaction ends.
    public func lockForTransaction(_ name: String) throws(DatabaseError) {
        _ = try query("SELECT pg_advisory_xact_lock(hashtext($1))", [name])
    }

    /// Pauses on the server (the connection stays busy, as a poll between two statements wants).
    public func sleep(for duration: Duration) throws(DatabaseError) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        _ = try query("SELECT pg_sleep($1::float8)", [String(seconds)])
    }

    /// The oldest transaction still running in the cluster (`pg_snapshot_xmin` of the current
    /// snapshot), as text: every transaction below it has ended.
    public func snapshotHorizon() throws(DatabaseError) -> String {
        try query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").string(0, 0) ?? "0"
    }

    /// Whether transaction `tx` (an xid8 as text) is below the current snapshot's horizon.
    public func hasEnded(beforeHorizon tx: String) throws(DatabaseError) -> Bool {
        try query("SELECT $1::xid8 < pg_snapshot_xmin(pg_current_snapshot())", [tx]).bool(0, 0) == true
    }
}

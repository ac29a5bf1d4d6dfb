import Dispatch
import Synchronization

/// A shared advisory lock a process holds on a connection of its own for as long as it runs,
/// so that other sessions can see in `pg_locks` that it is alive.
///
/// What a lock held only during a unit of work cannot tell: a process starved of CPU, or
/// waiting for a pooled connection, holds nothing between its units, and looks gone to
/// anyone watching the clock. This lock stays held until the process lets it go or its
/// connection ends: a restart of the server, a crash of the process, or its host vanishing
/// (the session's TCP keepalives end it within about 30 s).
///
/// Shared, so that every holder of the same name holds it at once. Failing to take it is not
/// an error for the holder: readers then only lack the signal.
public final class PresenceLock: Sendable {
    private let conninfo: String
    private let name: String
    private let applicationName: String
    private let connection = Mutex<Connection?>(nil)
    private let queue = DispatchQueue(label: "tracker.presence-lock")

    /// - Parameters:
    ///   - conninfo: the database to hold it on (a `key=value` string or a URL).
    ///   - name: the lock's name, hashed with PostgreSQL's `hashtext` as readers hash it.
    ///   - applicationName: what `pg_stat_activity` shows for the connection.
    public init(conninfo: String, name: String, applicationName: String) {
        self.conninfo = conninfo
        self.name = name
        self.applicationName = applicationName
    }

    /// Takes the lock if it is not held on a live connection (first call, or after the
    /// server went away). Cheap when held: one `poll` of an idle socket, no round trip.
    /// - Returns: whether the lock is held now.
    @discardableResult
    public func hold() async -> Bool {
        let (conninfo, name, applicationName) = (self.conninfo, self.name, self.applicationName)
        // A queue of its own: opening a connection to a database that is down can block for the
        // connect timeout, which must not hold a thread other work shares.
        return await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: self.connection.withLock { held in
                if let c = held, c.isHealthy { return true }
                held?.close()
                held = nil
                do {
                    let c = try Connection.open(conninfo, applicationName: applicationName)
                    // The server's own keepalives end the session, and the lock, within about
                    // 30 s of the holder's host vanishing (the kernel's default is two hours).
                    try c.execute("SET tcp_keepalives_idle = 15; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3")
                    _ = try c.query("SELECT pg_advisory_lock_shared(hashtext($1))", [name])
                    held = c
                    return true
                } catch {
                    return false
                }
            }) }
        }
    }

    /// Lets the lock go (its connection closes); `hold()` takes it again.
    public func release() {
        connection.withLock { held in
            held?.close()
            held = nil
        }
    }

    deinit {
        release()
    }
}

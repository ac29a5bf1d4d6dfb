import Synchronization

/// What a key may do: send events, or read reports.
public enum KeyScope: String, Sendable, CaseIterable {
    case ingest
    case report
}

/// The holder of a valid key, as the request handlers see it.
public struct Principal: Sendable, Hashable {
    public var name: String
    public var scope: KeyScope
    /// A server key: its events may carry the device's `userAgent` and `ip`.
    public var server: Bool = false
    /// The networks the key is scoped to (PROTOCOL.md 11); `nil`: every network.
    public var networks: NetworkScope? = nil

    public init(name: String, scope: KeyScope, server: Bool = false, networks: NetworkScope? = nil) {
        self.name = name
        self.scope = scope
        self.server = server
        self.networks = networks
    }
}

/// A stored key, without the key itself (only its hash is kept).
public struct APIKeyRecord: Sendable, Hashable {
    public var name: String
    public var scope: KeyScope
    /// A server key (`--server`): its events may carry the device's `userAgent` and `ip`.
    public var server: Bool
    /// The networks it is scoped to; `nil`: every network.
    public var networks: NetworkScope?
    /// The first characters of the key, to recognise it in a list.
    public var prefix: String
    public var createdAt: String
    public var revokedAt: String?
}

/// Why a key could not be created or revoked.
public enum APIKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The name (given) breaks `APIKeys.nameRule`.
    case invalidName(String)
    case nameTaken(String)
    case notFound(String)

    public var description: String {
        switch self {
        case .invalidName(let name): "invalid key name '\(name)': \(APIKeys.nameRule)"
        case .nameTaken(let name): "a key named '\(name)' already exists; pick another name"
        case .notFound(let name): "no active key named '\(name)'"
        }
    }
}

/// API keys, stored as SHA-256 hashes (computed here: a key never reaches the database).
///
/// The active keys' hashes are held in memory and reloaded when older than `cacheTTL`, so a
/// revoked key stops working within `cacheTTL` plus one reload (at most twice `cacheTTL` plus
/// one reload when reloads are slow) and a request costs no key
/// query in the steady state. A key the table holds is answered from it while the reload that
/// its age calls for runs in the background (up to twice `cacheTTL`; older, the request waits
/// for the reload): before, every request that arrived while the reload ran waited for the next
/// one, 250 ms later, every 5 s (the single-event benchmark's p99 of 200 to 400 ms). A key the table does not hold (a new one, or a guess) waits for a reload that began
/// after it arrived; all such requests share one reload, at most one per `minReloadInterval`,
/// so a flood of random keys costs a few queries a second, not one each, and memory holds
/// only the table (before, each unknown key cost a query and a cache entry).
public final class APIKeys: Sendable {
    private let pool: ConnectionPool
    private let cacheTTL: Duration
    private let loader: KeyTableLoader
    private let table = Mutex<(keys: [KeyDigest: Principal], loadedAt: ContinuousClock.Instant)?>(nil)
    /// Whether a background reload of a stale table is under way (one at a time).
    private let refreshing = Atomic<Bool>(false)

    public init(pool: ConnectionPool, cacheTTL: Duration = .seconds(5), minReloadInterval: Duration = .milliseconds(250)) {
        self.pool = pool
        self.cacheTTL = cacheTTL
        self.loader = KeyTableLoader(minInterval: minReloadInterval)
    }

    /// What `create` accepts as a name.
    public static let nameRule = "a key name is 1 to 64 letters, digits, '.', '_' or '-'"

    /// Creates a key and returns it; this is the only time the key itself exists.
    ///
    /// - Parameters:
    ///   - name: the key's name (`nameRule`), unique.
    ///   - scope: what the key may do.
    ///   - server: an ingest key of a server sending events on devices' behalf, whose events
    ///     may carry the device's `userAgent` and `ip`.
    ///   - networks: the networks the key sends or reads (PROTOCOL.md 11); `nil`: every network.
    public func create(name: String, scope: KeyScope, server: Bool = false, networks: NetworkScope? = nil) async throws -> String {
        guard Self.isValidName(name) else {
            throw APIKeyError.invalidName(name)
        }
        let key = Self.generate()
        let prefix = String(key.prefix(10))
        let hash = KeyDigest(key: key).byteaText
        do {
            try await pool.withConnection { connection in
                _ = try connection.query(
                    "INSERT INTO api_keys (name, scope, key_hash, key_prefix, server, networks) VALUES ($1, $2, $3::bytea, $4, $5::boolean, $6::text[])",
                    [name, scope.rawValue, hash, prefix, server ? "true" : "false", networks.map { "{" + $0.description + "}" }])
            }
        } catch let error as DatabaseError where error.state == .uniqueViolation {
            throw APIKeyError.nameTaken(name)
        }
        return key
    }

    public func list() async throws -> [APIKeyRecord] {
        try await pool.withConnection { connection in
            let r = try connection.query("""
                SELECT name, scope, key_prefix,
                       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                       to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), server, array_to_string(networks, ',')
                FROM api_keys ORDER BY name
                """)
            return (0..<r.rowCount).map { row in
                APIKeyRecord(
                    name: r.string(row, 0) ?? "", scope: KeyScope(rawValue: r.string(row, 1) ?? "") ?? .ingest,
                    server: r.bool(row, 5) ?? false, networks: Self.networks(r.string(row, 6)),
                    prefix: r.string(row, 2) ?? "", createdAt: r.string(row, 3) ?? "", revokedAt: r.string(row, 4))
            }
        }
    }

    /// Revokes the key named `name`; it stops authenticating within the cache TTL.
    public func revoke(name: String) async throws {
        let changed = try await pool.withConnection { connection in
            try connection.query(
                "UPDATE api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL", [name]
            ).affectedRows
        }
        guard changed == 1 else { throw APIKeyError.notFound(name) }
        // An empty table stamped now, not none: a reload that began before the revocation
        // (in the background) is older and can no longer put the revoked key back.
        table.withLock { $0 = ([:], ContinuousClock.now) }
    }

    /// The principal of a presented key, or `nil` for an unknown or revoked key.
    public func authenticate(_ presented: String) async throws -> Principal? {
        let digest = KeyDigest(key: presented)
        let now = ContinuousClock.now
        if let (principal, age) = inMemory(digest, at: now) {
            if age < cacheTTL { return principal }
            if age < cacheTTL * 2 {
                refreshInBackground(requestedAt: now)
                return principal
            }
        }
        return try await reload(after: now)[digest]
    }

    /// The principal of a presented key from the table in memory, without waiting: `nil` when
    /// the key is not in it or the table is older than twice the cache TTL (then only
    /// `authenticate` can tell). For answers given on the event loop, where nothing may wait
    /// for the database. Like `authenticate`, it answers from a table past the TTL while it
    /// reloads it in the background, so these answers do not stop every `cacheTTL`.
    public func cachedPrincipal(_ presented: String) -> Principal? {
        let now = ContinuousClock.now
        guard let (principal, age) = inMemory(KeyDigest(key: presented), at: now), age < cacheTTL * 2 else { return nil }
        if age >= cacheTTL { refreshInBackground(requestedAt: now) }
        return principal
    }

    /// Loads the table in the background, so that answers from memory (`cachedPrincipal`) are
    /// possible from the first requests on, before any request waited for a reload. A failed
    /// load (the database down) is left to the requests' own reloads.
    public func loadInBackground() {
        refreshInBackground(requestedAt: .now)
    }

    /// `digest`'s principal in the table in memory, and the table's age at `now`.
    private func inMemory(_ digest: KeyDigest, at now: ContinuousClock.Instant) -> (principal: Principal, age: Duration)? {
        table.withLock { current in
            guard let current, let principal = current.keys[digest] else { return nil }
            return (principal, now - current.loadedAt)
        }
    }

    /// The table as loaded by a reload that began after `instant` (shared with other callers).
    private func reload(after instant: ContinuousClock.Instant) async throws -> [KeyDigest: Principal] {
        let pool = self.pool
        let (keys, loadedAt) = try await loader.keys(loadedAfter: instant) { try await Self.load(pool) }
        table.withLock { t in
            if t == nil || t!.loadedAt < loadedAt { t = (keys, loadedAt) }
        }
        return keys
    }

    private func refreshInBackground(requestedAt instant: ContinuousClock.Instant) {
        guard refreshing.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        Task {
            defer { refreshing.store(false, ordering: .releasing) }
            _ = try? await reload(after: instant)
        }
    }

    /// Every active key's hash and principal.
    static func load(_ pool: ConnectionPool) async throws -> [KeyDigest: Principal] {
        try await pool.withConnection { connection in
            let r = try connection.query("""
                SELECT key_hash, name, scope, server, array_to_string(networks, ',') FROM api_keys WHERE revoked_at IS NULL
                """)
            var keys: [KeyDigest: Principal] = [:]
            for row in 0..<r.rowCount {
                guard let hash = r.string(row, 0).flatMap(KeyDigest.init(byteaText:)), let name = r.string(row, 1),
                      let scope = r.string(row, 2).flatMap(KeyScope.init(rawValue:)) else { continue }
                // A stored list that is no scope (the table's check refuses one) serves no network, never every one.
                let networks = r.string(row, 4).map { Self.networks($0) ?? NetworkScope.none }
                keys[hash] = Principal(name: name, scope: scope, server: r.bool(row, 3) ?? false, networks: networks)
            }
            return keys
        }
    }

    /// The scope of a stored list (`6499,21775744923`); `nil` for none.
    static func networks(_ list: String?) -> NetworkScope? {
        list.flatMap { try? NetworkScope.parse($0) }
    }

    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
        }
    }

    /// `trk_` and 40 base-62 characters (238 bits) from the system's secure generator.
    static func generate() -> String {
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        var rng = SystemRandomNumberGenerator()
        return "trk_" + String((0..<40).map { _ in alphabet[Int(rng.next(upperBound: UInt64(alphabet.count)))] })
    }
}

/// Reloads of the key table, shared: a caller waits for a load that began after the instant it
/// gives, and loads start at most once per `minInterval`.
actor KeyTableLoader {
    typealias Keys = [KeyDigest: Principal]
    private let minInterval: Duration
    private var lastStart: ContinuousClock.Instant?
    private var inFlight: (task: Task<Keys, any Error>, startedAt: ContinuousClock.Instant)?

    init(minInterval: Duration) {
        self.minInterval = minInterval
    }

    func keys(loadedAfter instant: ContinuousClock.Instant, _ load: @escaping @Sendable () async throws -> Keys) async throws -> (Keys, ContinuousClock.Instant) {
        while true {
            if let current = inFlight {
                if current.startedAt >= instant { return (try await current.task.value, current.startedAt) }
                _ = try? await current.task.value
                if inFlight?.startedAt == current.startedAt { inFlight = nil }
                continue
            }
            if let lastStart, ContinuousClock.now < lastStart + minInterval {
                try await Task.sleep(until: lastStart + minInterval)
                continue
            }
            let start = ContinuousClock.now
            lastStart = start
            let task = Task { try await load() }
            inFlight = (task, start)
            defer { if inFlight?.startedAt == start { inFlight = nil } }
            return (try await task.value, start)
        }
    }
}

import ServiceLifecycle

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
/// The active keys' hashes are held in memory (`KeyCacheStateMachine` states the rules): a
/// request costs no key query in the steady state, a key revoked elsewhere stops working
/// within `cacheTTL` plus one reload (at most twice `cacheTTL` plus one reload when reloads are
/// slow), a key created elsewhere works after one reload, and requests with unknown keys share
/// reloads, at most one per `minReloadInterval`, so a flood of guesses costs a few queries a
/// second and memory holds only the table.
///
/// As a `Service` it loads the table when it starts and runs every reload, and the timer that
/// spaces them, as children of `run()`: run it (before the HTTP server, after the pool) for
/// `authenticate` and `cachedPrincipal`. `create`, `list` and `revoke` need no `run()`.
public final class APIKeys: Service, Sendable {
    private let pool: ConnectionPool
    private let cache: KeyCache<ContinuousClock>

    public init(pool: ConnectionPool, cacheTTL: Duration = .seconds(5), minReloadInterval: Duration = .milliseconds(250)) {
        self.pool = pool
        cache = KeyCache(cacheTTL: cacheTTL, minReloadInterval: minReloadInterval, clock: ContinuousClock(),
                         readTable: { try await APIKeys.load(pool) })
    }

    /// Keeps the table in memory until the service group shuts down (or the task is cancelled).
    public func run() async throws {
        await withGracefulShutdownHandler {
            await cache.run()
        } onGracefulShutdown: { [cache] in
            cache.finish()
        }
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
        cache.revoked()
    }

    /// The principal of a presented key, or `nil` for an unknown or revoked key.
    public func authenticate(_ presented: String) async throws -> Principal? {
        try await cache.principal(KeyDigest(key: presented))
    }

    /// The principal of a presented key from the table in memory, without waiting: `nil` when
    /// the key is not in it or the table is older than twice the cache TTL (then only
    /// `authenticate` can tell). For answers given on the event loop, where nothing may wait
    /// for the database. Like `authenticate`, it answers from a table past the TTL while it
    /// reloads it, so these answers do not stop every `cacheTTL`.
    public func cachedPrincipal(_ presented: String) -> Principal? {
        cache.cachedPrincipal(KeyDigest(key: presented))
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

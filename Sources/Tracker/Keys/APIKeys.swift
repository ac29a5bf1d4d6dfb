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
}

/// A stored key, without the key itself (only its hash is kept).
public struct APIKeyRecord: Sendable, Hashable {
    public var name: String
    public var scope: KeyScope
    /// The first characters of the key, to recognise it in a list.
    public var prefix: String
    public var createdAt: String
    public var revokedAt: String?
}

/// Why a key could not be created or revoked.
public enum APIKeyError: Error, Sendable, Equatable {
    case invalidName(String)
    case nameTaken(String)
    case notFound(String)
}

/// API keys, stored as SHA-256 hashes (computed by PostgreSQL's `sha256`).
///
/// Lookups are cached for a few seconds so that authentication does not cost a query per
/// request; a revoked key therefore stops working within `cacheTTL`.
public final class APIKeys: Sendable {
    private let pool: ConnectionPool
    private let cacheTTL: Duration
    private let cache = Mutex<[String: (principal: Principal?, expires: ContinuousClock.Instant)]>([:])
    private static let maxCachedKeys = 10_000

    public init(pool: ConnectionPool, cacheTTL: Duration = .seconds(5)) {
        self.pool = pool
        self.cacheTTL = cacheTTL
    }

    /// Creates a key and returns it; this is the only time the key itself exists.
    public func create(name: String, scope: KeyScope) async throws -> String {
        guard Self.isValidName(name) else {
            throw APIKeyError.invalidName("a key name is 1 to 64 letters, digits, '.', '_' or '-'")
        }
        let key = Self.generate()
        let prefix = String(key.prefix(10))
        do {
            try await pool.withConnection { connection in
                _ = try connection.query(
                    "INSERT INTO api_keys (name, scope, key_hash, key_prefix) VALUES ($1, $2, sha256(convert_to($3, 'UTF8')), $4)",
                    [name, scope.rawValue, key, prefix])
            }
        } catch let error as DatabaseError where error.sqlState == "23505" {
            throw APIKeyError.nameTaken(name)
        }
        return key
    }

    public func list() async throws -> [APIKeyRecord] {
        try await pool.withConnection { connection in
            let r = try connection.query("""
                SELECT name, scope, key_prefix,
                       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                       to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                FROM api_keys ORDER BY name
                """)
            return (0..<r.rowCount).map { row in
                APIKeyRecord(
                    name: r.string(row, 0) ?? "", scope: KeyScope(rawValue: r.string(row, 1) ?? "") ?? .ingest,
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
        cache.withLock { $0.removeAll() }
    }

    /// The principal of a presented key, or `nil` for an unknown or revoked key.
    public func authenticate(_ presented: String) async throws -> Principal? {
        let now = ContinuousClock.now
        if let hit = cache.withLock({ $0[presented] }), hit.expires > now {
            return hit.principal
        }
        let principal: Principal? = try await pool.withConnection { connection in
            let r = try connection.query(
                "SELECT name, scope FROM api_keys WHERE key_hash = sha256(convert_to($1, 'UTF8')) AND revoked_at IS NULL",
                [presented])
            guard r.rowCount == 1, let name = r.string(0, 0), let scope = r.string(0, 1).flatMap(KeyScope.init(rawValue:)) else {
                return nil
            }
            return Principal(name: name, scope: scope)
        }
        cache.withLock { c in
            if c.count >= Self.maxCachedKeys { c.removeAll(keepingCapacity: true) }
            c[presented] = (principal, now + cacheTTL)
        }
        return principal
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

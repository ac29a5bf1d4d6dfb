/// The `beacon_rejections` table: authentic beacons the log did not take, and why.
///
/// Not part of the log (PROTOCOL.md 4 keeps accepted events only), so a row may be updated: a
/// reload of the same expired pixel adds an attempt instead of a row.
public struct BeaconRejections: Sendable {
    private let pool: ConnectionPool

    public init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// Stores `rejection` durably (autocommit, synchronous commit) before returning.
    public func record(_ rejection: BeaconRejection) async throws {
        let r = rejection
        let key = r.eventId ?? "(no id) " + r.eventJSON
        try await pool.withConnection { connection in
            _ = try connection.query("""
                INSERT INTO beacon_rejections (event_id, type, request_id, reason, message, event, destination,
                                               expires_at, issuer, first_received_at, last_received_at)
                VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::timestamptz, $9, $10::timestamptz, $10::timestamptz)
                ON CONFLICT (event_id) DO UPDATE
                    SET attempts = beacon_rejections.attempts + 1,
                        last_received_at = greatest(beacon_rejections.last_received_at, EXCLUDED.last_received_at)
                """, [key, r.type, r.requestId, r.reason.rawValue, r.message, r.eventJSON, r.destination,
                      r.expiresAt.postgresText, r.issuer, r.receivedAt.postgresText])
        }
    }

    /// The most recently received rejections, newest first.
    public func latest(limit: Int) async throws -> [BeaconRejectionRecord] {
        try await pool.withConnection { connection in
            let r = try connection.query("""
                SELECT event_id, coalesce(type, ''), coalesce(request_id, ''), reason, attempts::text,
                       to_char(last_received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), message
                FROM beacon_rejections ORDER BY last_received_at DESC, event_id LIMIT $1::int
                """, [String(limit)])
            return (0..<r.rowCount).map { row in
                BeaconRejectionRecord(
                    eventId: r.string(row, 0) ?? "", type: r.string(row, 1) ?? "", requestId: r.string(row, 2) ?? "",
                    reason: r.string(row, 3) ?? "", attempts: Int(r.string(row, 4) ?? "") ?? 0,
                    lastReceivedAt: r.string(row, 5) ?? "", message: r.string(row, 6) ?? "")
            }
        }
    }
}

/// One row of `beacon_rejections` as `tracker beacon rejections` shows it.
public struct BeaconRejectionRecord: Sendable, Hashable {
    public var eventId: String
    public var type: String
    public var requestId: String
    public var reason: String
    public var attempts: Int
    public var lastReceivedAt: String
    public var message: String
}

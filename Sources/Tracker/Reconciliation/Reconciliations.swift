import Crypto
import Metrics

/// A stored import of an Ad Manager report, as its answer shows it.
public struct ReconciliationImport: Sendable, Equatable {
    public var id: String
    /// The time zone the file's days are local days of.
    public var tz: String
    /// Data rows (the header and a Total row are not counted).
    public var rows: Int
    public var matched: Int
    /// Rows whose ad unit matched no path, or several: their row number, ad unit as given, and
    /// why (`UnitMatch.unknown` or `.ambiguous`).
    public var unmatched: [(row: Int, adUnit: String, reason: UnitMatch)]
    public var firstDay: Day?
    public var lastDay: Day?
    public var importedAt: String
    public var importedBy: String
    /// Whether the same file was imported before (this is that import).
    public var existing: Bool
    /// Whether the file has Ad Manager's requests column (`Column.TOTAL_AD_REQUESTS`).
    public var hasRequests = false
    /// The networks of the key that made it (`nil`: an unscoped key, or the command line).
    public var networks: NetworkScope?

    /// Whether a key scoped to `scope` (`nil`: unscoped) may see this import: an unscoped key
    /// sees every import, a scoped one those made by keys whose networks lie within its own.
    public func isVisible(to scope: NetworkScope?) -> Bool {
        guard let scope else { return true }
        guard let networks else { return false }
        return scope.covers(networks)
    }

    public static func == (a: ReconciliationImport, b: ReconciliationImport) -> Bool {
        a.id == b.id && a.tz == b.tz && a.rows == b.rows && a.matched == b.matched && a.hasRequests == b.hasRequests && a.firstDay == b.firstDay
            && a.lastDay == b.lastDay
            && a.unmatched.elementsEqual(b.unmatched, by: { $0.row == $1.row && $0.adUnit == $1.adUnit && $0.reason == $1.reason })
            && a.importedAt == b.importedAt && a.importedBy == b.importedBy && a.existing == b.existing
    }
}

/// Why an import or a reconciliation cannot be made; each says what to fix.
public enum ReconciliationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, or the unit map, cannot be read (`400`).
    case unreadable(ImportError)
    /// No import has that id, or none exists yet (`404`).
    case noSuchImport(String?)
    /// A parameter breaks its rule (`400`).
    case invalidParameter(String)
    /// A scoped key's file has a row whose ad unit is outside the key's networks (`400`).
    case outsideNetworks(row: Int, adUnit: String)

    public var description: String {
        switch self {
        case .unreadable(let error): "\(error); nothing of the file was imported"
        case .noSuchImport(let id?): "no reconciliation import has the id '\(id)' (tracker reconcile list shows them)"
        case .noSuchImport(nil): "no Ad Manager report has been imported yet: POST /v1/reconciliations?tz=ZONE or tracker reconcile import FILE --tz ZONE"
        case .invalidParameter(let message): message
        case .outsideNetworks(let row, let adUnit):
            "row \(row): ad unit \(adUnit) belongs to network \(NetworkScope.network(of: adUnit)), which this key cannot import for; "
                + "nothing of the file was imported (import it with a key of that network)"
        }
    }
}

/// Imports of Ad Manager report exports (`reconciliation_imports`, `reconciliation_rows`).
///
/// An import is stored whole or not at all, and never changes; its id is derived from the
/// file, the time zone and the unit map, so importing the same again answers the existing import.
public struct Reconciliations: Sendable {
    /// Where imports are written (the server's primary connection).
    private let pool: ConnectionPool
    /// Where imports and the projections' ad units are read (the reports' connection).
    private let readPool: ConnectionPool
    /// Imports checked by `checkTolerance`, by what it found (`tracker_reconciliation_imports_total`).
    private let checked: (within: Counter, outside: Counter)

    public init(pool: ConnectionPool, readPool: ConnectionPool? = nil) {
        self.pool = pool
        self.readPool = readPool ?? pool
        checked = (Counter(label: "tracker_reconciliation_imports_total", dimensions: [("tolerance", "within")]),
                   Counter(label: "tracker_reconciliation_imports_total", dimensions: [("tolerance", "outside")]))
    }

    /// The largest file an import reads (a 100 000-row export is about 6 MiB).
    public static let maxBytes = 32 * 1024 * 1024

    /// Imports an export.
    ///
    /// - Parameters:
    ///   - file: the CSV export.
    ///   - timeZone: the zone whose local days the file's dates are (validated by the caller
    ///     against the database's zones).
    ///   - unitMap: Ad Manager's ad unit names to paths; names without an entry are matched
    ///     as a path, or by the last segment of one known ad unit path.
    ///   - importedBy: who imported it (a key's name, or the command line).
    ///   - networks: a scoped key's networks: a row that maps to an ad unit outside them refuses
    ///     the whole file, and names are matched among their ad units only.
    public func importReport(_ file: [UInt8], timeZone: String, unitMap: [UInt8]? = nil, importedBy: String,
                             networks: NetworkScope? = nil) async throws -> ReconciliationImport {
        let report: AdManagerReport
        var map = AdUnitMap()
        do throws(ImportError) {
            report = try AdManagerReport.parse(file)
            if let unitMap { map = try AdUnitMap.parse(unitMap) }
        } catch {
            throw ReconciliationError.unreadable(error)
        }
        var digest = SHA256()
        digest.update(data: Array(timeZone.utf8) + [0])
        digest.update(data: (unitMap ?? []) + [0])
        // Keys of other networks importing the same file make imports of their own, each seen by its networks.
        if let networks { digest.update(data: Array("networks:\(networks)".utf8) + [0]) }
        digest.update(data: file)
        let id = digest.finalize().prefix(12).map { byte in
            let hex = Array("0123456789abcdef")
            return String([hex[Int(byte >> 4)], hex[Int(byte & 15)]])
        }.joined()
        if let existing = try await load(id: id), existing.isVisible(to: networks) {
            var again = existing
            again.existing = true
            return again
        }

        // The projections must hold what was committed before the import, or a unit whose events
        // are still on their way would stay unmatched in this import for good.
        try await LogCursor(pool: readPool).waitForProjections(maxWait: LogCursor.defaultReportWait, stallLimit: LogCursor.defaultStallLimit)
        let known = try await readPool.withConnection { connection in
            try connection.query(ReconciliationSQL.knownAdUnits).rows.compactMap { $0.first ?? nil }
        }.filter { networks?.contains(adUnit: $0) ?? true }
        let resolve = UnitResolver(map: map, known: known)
        var rows = BinaryArray(.int4), days = BinaryArray(.int8), names = BinaryArray(.text), paths = BinaryArray(.text)
        var how = BinaryArray(.text)
        var impressions = BinaryArray(.int8), clicks = BinaryArray(.int8), requests = BinaryArray(.int8)
        var matched = 0
        for r in report.rows {
            rows.append(Int32(clamping: r.row))
            days.append(Int64(r.day.daysSinceEpoch))
            names.append(r.adUnit)
            let (path, match) = resolve.path(of: r.adUnit)
            if let networks, let path, !networks.contains(adUnit: path) {
                throw ReconciliationError.outsideNetworks(row: r.row, adUnit: path)
            }
            paths.append(path)
            how.append(match.rawValue)
            if path != nil { matched += 1 }
            impressions.append(r.impressions)
            clicks.append(r.clicks)
            if let n = r.requests { requests.append(n) } else { requests.appendNull() }
        }
        let first = report.rows.map(\.day).min(), last = report.rows.map(\.day).max()
        let parameters: [Parameter] = [.text(id), .text(timeZone), .text(String(report.rows.count)), .text(String(matched)),
                                       first.map { .text($0.description) } ?? .null, last.map { .text($0.description) } ?? .null,
                                       .text(importedBy), .text(report.hasRequests ? "true" : "false"),
                                       networks.map { .text("{\($0)}") } ?? .null]
        let rowParameters: [Parameter] = [.text(id), rows.parameter, days.parameter, names.parameter, paths.parameter,
                                          how.parameter, impressions.parameter, clicks.parameter, requests.parameter]
        let inserted = try await pool.withConnection { connection in
            try connection.transaction {
                let made = try connection.query(ReconciliationSQL.insertImport, parameters)
                guard made.rowCount == 1 else { return false }  // the same import, made at the same moment elsewhere
                try connection.query(ReconciliationSQL.insertRows, rowParameters)
                return true
            }
        }
        guard var stored = try await load(id: id, on: pool) else {
            throw DatabaseError(.unexpectedResult, serverMessage: "reconciliation import \(id) was not stored")
        }
        stored.existing = !inserted
        return stored
    }

    /// Reconciles `imported` over its days at the default tolerance and counts it within or
    /// outside tolerance, so that an alert can tell an operator an import needs a look; `nil`
    /// (nothing counted) for an import without rows. The import stands whatever this finds.
    @discardableResult
    public func checkTolerance(of imported: ReconciliationImport, reports: Reports) async throws -> Bool? {
        guard imported.firstDay != nil else { return nil }
        let result = try await report(ReconciliationQuery(importId: imported.id), reports: reports)
        let within = result.rows.allSatisfy(\.withinTolerance)
        (within ? checked.within : checked.outside).increment()
        return within
    }

    /// Every import a key scoped to `networks` may see (`nil`: every import), newest first.
    public func list(visibleTo networks: NetworkScope? = nil) async throws -> [ReconciliationImport] {
        try await readPool.withConnection { connection in
            let r = try connection.query(ReconciliationSQL.imports + " ORDER BY i.imported_at DESC, i.id")
            return try (0..<r.rowCount).map { try Self.importRow(r, $0, on: connection) }.filter { $0.isVisible(to: networks) }
        }
    }

    /// The import `id`, or the newest when `id` is `nil`, among those a key scoped to
    /// `networks` may see; `nil` when there is none (an import it may not see is as one that
    /// does not exist).
    public func load(id: String?, visibleTo networks: NetworkScope? = nil) async throws -> ReconciliationImport? {
        guard let id else { return try await list(visibleTo: networks).first }
        return try await load(id: id, on: readPool).flatMap { $0.isVisible(to: networks) ? $0 : nil }
    }

    private func load(id: String, on pool: ConnectionPool) async throws -> ReconciliationImport? {
        try await pool.withConnection { connection in
            let r = try connection.query(ReconciliationSQL.imports + " WHERE i.id = $1", [id])
            return r.rowCount == 1 ? try Self.importRow(r, 0, on: connection) : nil
        }
    }

    private static func importRow(_ r: QueryResult, _ row: Int, on connection: Connection) throws -> ReconciliationImport {
        let id = r.string(row, 0) ?? ""
        let unmatched = try connection.query(ReconciliationSQL.unmatched, [id])
        return ReconciliationImport(
            id: id, tz: r.string(row, 1) ?? "UTC", rows: Int(r.int64(row, 2) ?? 0), matched: Int(r.int64(row, 3) ?? 0),
            unmatched: (0..<unmatched.rowCount).map {
                (Int(unmatched.int64($0, 0) ?? 0), unmatched.string($0, 1) ?? "", UnitMatch(rawValue: unmatched.string($0, 2) ?? "") ?? .unknown)
            },
            firstDay: r.string(row, 4).flatMap { Day(iso: $0) }, lastDay: r.string(row, 5).flatMap { Day(iso: $0) },
            importedAt: r.string(row, 6) ?? "", importedBy: r.string(row, 7) ?? "", existing: false,
            hasRequests: r.string(row, 8) == "t", networks: r.string(row, 9).map { (try? NetworkScope.parse($0)) ?? .none })
    }

    /// Ad Manager's counts of the import, summed by local day and matched ad unit path.
    func counts(of id: String, from: Day, to: Day) async throws -> [[String]: AdManagerCounts] {
        try await readPool.withConnection { connection in
            let r = try connection.query(ReconciliationSQL.counts, [id, from.description, to.description])
            var out: [[String]: AdManagerCounts] = [:]
            for row in 0..<r.rowCount {
                out[[r.string(row, 0) ?? "", r.string(row, 1) ?? ""]] = AdManagerCounts(
                    impressions: r.int64(row, 2) ?? 0, clicks: r.int64(row, 3) ?? 0, requests: r.int64(row, 4) ?? 0)
            }
            return out
        }
    }
}

/// Ad Manager's counts of one local day and ad unit path (`requests` 0 when the file has none).
struct AdManagerCounts {
    var impressions: Int64 = 0
    var clicks: Int64 = 0
    var requests: Int64 = 0
}

/// How an import row's ad unit became a path, or why it did not.
public enum UnitMatch: String, Sendable, Hashable {
    /// Through the unit map.
    case map
    /// The value is a path.
    case path
    /// The one known path whose last segment it is.
    case code
    /// No path: not in the map, not a path, the last segment of no known path.
    case unknown
    /// The last segment of several known paths: map it.
    case ambiguous
}

/// How an Ad Manager ad unit becomes a path: the unit map; else the value when it is a path;
/// else the one known path whose last segment (the ad unit code) equals it.
struct UnitResolver {
    let map: AdUnitMap
    /// Known paths by their last segment.
    let byCode: [String: [String]]

    init(map: AdUnitMap, known: [String]) {
        self.map = map
        byCode = Dictionary(grouping: known, by: { String($0.split(separator: "/").last ?? "") })
    }

    func path(of adUnit: String) -> (String?, UnitMatch) {
        if let mapped = map.paths[adUnit] { return (mapped, .map) }
        if adUnit.hasPrefix("/") { return (adUnit, .path) }
        switch byCode[adUnit]?.count ?? 0 {
        case 0: return (nil, .unknown)
        case 1: return (byCode[adUnit]![0], .code)
        default: return (nil, .ambiguous)
        }
    }
}

enum ReconciliationSQL {
    /// Every ad unit path the projections count anything under (test and invalid traffic too).
    static let knownAdUnits = ProjectionTable.allCases.map { "SELECT ad_unit FROM \($0.tableName(.day))" }.joined(separator: " UNION ")

    static let insertImport = """
        INSERT INTO reconciliation_imports (id, tz, rows, matched, first_day, last_day, imported_by, has_requests, networks)
        VALUES ($1, $2, $3::int, $4::int, $5::date, $6::date, $7, $8::boolean, $9::text[])
        ON CONFLICT (id) DO NOTHING
        RETURNING id
        """

    static let insertRows = """
        INSERT INTO reconciliation_rows (import_id, row, day, ad_manager_unit, ad_unit, matched_by, impressions, clicks, requests)
        SELECT $1, r, date '1970-01-01' + d::int, n, p, m, i, c, q
        FROM unnest($2::int4[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::int8[], $9::int8[])
             AS u(r, d, n, p, m, i, c, q)
        """

    /// Columns: 0 id, 1 tz, 2 rows, 3 matched, 4 first day, 5 last day, 6 imported at (UTC), 7 imported by,
    /// 8 has requests, 9 the importing key's networks.
    static let imports = """
        SELECT i.id, i.tz, i.rows, i.matched, i.first_day::text, i.last_day::text,
               to_char(i.imported_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), i.imported_by, i.has_requests,
               array_to_string(i.networks, ',')
        FROM reconciliation_imports i
        """

    static let unmatched = """
        SELECT row, ad_manager_unit, matched_by FROM reconciliation_rows WHERE import_id = $1 AND ad_unit IS NULL ORDER BY row
        """

    /// Columns: 0 day, 1 ad unit path, 2 impressions, 3 clicks, 4 requests (rows of one day and path summed).
    static let counts = """
        SELECT day::text, ad_unit, sum(impressions)::bigint, sum(clicks)::bigint, COALESCE(sum(requests), 0)::bigint
        FROM reconciliation_rows
        WHERE import_id = $1 AND ad_unit IS NOT NULL AND day BETWEEN $2::date AND $3::date
        GROUP BY day, ad_unit
        """
}

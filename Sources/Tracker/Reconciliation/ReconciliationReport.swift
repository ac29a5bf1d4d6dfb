/// One row of the reconciliation report: a local day and ad unit, Ad Manager's counts beside
/// the tracker's, and what the tracker knows of the difference.
public struct ReconciliationRow: Sendable, Equatable {
    public var day: String
    public var adUnit: String
    public var adManagerImpressions: Int64
    public var impressions: Int64
    /// (tracker − Ad Manager) / Ad Manager; `nil` when Ad Manager counted 0.
    public var impressionDiscrepancy: Double?
    public var adManagerClicks: Int64
    public var clicks: Int64
    public var clickDiscrepancy: Double?
    public var withinTolerance: Bool
    public var duplicateImpressions: Int64
    public var givtImpressions: Int64
    public var staleImpressions: Int64
    public var givtClicks: Int64
    public var duplicateClicks: Int64

    /// The report's columns, in order.
    public static let columns = ["day", "adUnit", "adManagerImpressions", "impressions", "impressionDiscrepancy", "adManagerClicks",
                                 "clicks", "clickDiscrepancy", "withinTolerance", "duplicateImpressions", "givtImpressions",
                                 "staleImpressions", "givtClicks", "duplicateClicks"]
}

/// The reconciliation report of one import.
public struct ReconciliationResult: Sendable {
    public var from: Day
    public var to: Day
    public var imported: ReconciliationImport
    public var threshold: Double
    public var ivtRules: Int
    public var rows: [ReconciliationRow]
    public var lag: ProjectionLag
}

extension Reconciliations {
    /// Ad Manager's counts of an import next to the tracker's, per local day (in the import's
    /// zone) and ad unit: the summary report's impressions and clicks summed over formats.
    public func report(_ query: ReconciliationQuery, reports: Reports) async throws -> ReconciliationResult {
        guard let imported = try await load(id: query.importId) else { throw ReconciliationError.noSuchImport(query.importId) }
        if let zone = query.timeZone {
            let named: String
            do {
                named = try await reports.timeZone(zone)
            } catch let error as ReportQueryError {
                throw ReconciliationError.invalidParameter(error.description)
            }
            guard named == imported.tz else {
                throw ReconciliationError.invalidParameter(
                    "tz must be the import's time zone, \(imported.tz), or be left out: its days are Ad Manager's, in the zone the file was exported in; got '\(zone)'")
            }
        }
        guard let from = query.from ?? imported.firstDay, let to = query.to ?? imported.lastDay else {
            throw ReconciliationError.invalidParameter("the import has no rows, so it has no days: give from and to")
        }
        let summary: ReportResult
        do {
            summary = try await reports.run(try ReportQuery(kind: .summary, from: from, to: to, includeTest: query.includeTest,
                                                            timeZone: imported.tz))
        } catch let error as ReportQueryError {
            throw ReconciliationError.invalidParameter(error.description)
        }
        let column = Dictionary(uniqueKeysWithValues: summary.columns.enumerated().map { ($1, $0) })
        let measures = ["impressions", "clicks", "duplicateImpressions", "givtImpressions", "staleImpressions", "givtClicks", "duplicateClicks"]
        var tracker: [[String]: [String: Int64]] = [:]
        for row in summary.rows {
            guard case .text(let day) = row[column["day"]!], case .text(let unit) = row[column["adUnit"]!] else { continue }
            for m in measures {
                if case .count(let n) = row[column[m]!] { tracker[[day, unit], default: [:]][m, default: 0] += n }
            }
        }
        tracker = tracker.filter { $0.value.values.contains { $0 != 0 } }
        let adManager = try await counts(of: imported.id, from: from, to: to)
        let keys = Set(tracker.keys).union(adManager.keys).sorted { a, b in
            a[0] != b[0] ? a[0] < b[0] : Array(a[1].utf8).lexicographicallyPrecedes(Array(b[1].utf8))
        }
        let rows = keys.map { key -> ReconciliationRow in
            let t = tracker[key] ?? [:]
            let (amImpressions, amClicks) = adManager[key] ?? (0, 0)
            let impressions = t["impressions"] ?? 0, clicks = t["clicks"] ?? 0
            let impressionDiscrepancy = Self.discrepancy(impressions, amImpressions)
            let clickDiscrepancy = Self.discrepancy(clicks, amClicks)
            func within(_ d: Double?, _ tracked: Int64) -> Bool {
                d.map { abs($0) <= query.threshold + 1e-12 } ?? (tracked == 0)
            }
            return ReconciliationRow(
                day: key[0], adUnit: key[1], adManagerImpressions: amImpressions, impressions: impressions,
                impressionDiscrepancy: impressionDiscrepancy, adManagerClicks: amClicks, clicks: clicks, clickDiscrepancy: clickDiscrepancy,
                withinTolerance: within(impressionDiscrepancy, impressions) && within(clickDiscrepancy, clicks),
                duplicateImpressions: t["duplicateImpressions"] ?? 0, givtImpressions: t["givtImpressions"] ?? 0,
                staleImpressions: t["staleImpressions"] ?? 0, givtClicks: t["givtClicks"] ?? 0, duplicateClicks: t["duplicateClicks"] ?? 0)
        }
        return ReconciliationResult(from: from, to: to, imported: imported, threshold: query.threshold, ivtRules: summary.ivtRules,
                                    rows: rows, lag: summary.lag)
    }

    /// (tracker − Ad Manager) / Ad Manager, `nil` when Ad Manager has 0.
    static func discrepancy(_ tracker: Int64, _ adManager: Int64) -> Double? {
        adManager == 0 ? nil : Double(tracker - adManager) / Double(adManager)
    }
}

extension ReconciliationImport {
    /// The import's answer: `{"id", "tz", "rows", "matched", "unmatched": [{"row", "adUnit"}], "existing", …}`.
    public var json: String {
        var out = "{\"id\":"
        JSONText.appendQuoted(id, to: &out)
        out += ",\"tz\":"
        JSONText.appendQuoted(tz, to: &out)
        out += ",\"rows\":\(rows),\"matched\":\(matched),\"unmatched\":["
        for (i, u) in unmatched.enumerated() {
            if i > 0 { out += "," }
            out += "{\"row\":\(u.row),\"adUnit\":"
            JSONText.appendQuoted(u.adUnit, to: &out)
            out += ",\"reason\":\"\(u.reason.rawValue)\"}"
        }
        out += "],\"existing\":\(existing),\"from\":" + (firstDay.map { "\"\($0)\"" } ?? "null")
        out += ",\"to\":" + (lastDay.map { "\"\($0)\"" } ?? "null") + ",\"importedAt\":"
        JSONText.appendQuoted(importedAt, to: &out)
        out += ",\"importedBy\":"
        JSONText.appendQuoted(importedBy, to: &out)
        return out + "}"
    }
}

extension ReconciliationResult {
    private static func number(_ d: Double?) -> String {
        guard let d, d.isFinite else { return "null" }
        return String(d)
    }

    /// `{"from", "to", "import", "tz", "threshold", "ivtRules", "rows": [...]}`.
    public var json: String {
        var out = "{\"from\":\"\(from)\",\"to\":\"\(to)\",\"import\":"
        JSONText.appendQuoted(imported.id, to: &out)
        out += ",\"tz\":"
        JSONText.appendQuoted(imported.tz, to: &out)
        out += ",\"threshold\":\(threshold),\"ivtRules\":\(ivtRules),\"rows\":["
        for (i, r) in rows.enumerated() {
            if i > 0 { out += "," }
            out += "{\"day\":\"\(r.day)\",\"adUnit\":"
            JSONText.appendQuoted(r.adUnit, to: &out)
            out += ",\"adManagerImpressions\":\(r.adManagerImpressions),\"impressions\":\(r.impressions)"
            out += ",\"impressionDiscrepancy\":\(Self.number(r.impressionDiscrepancy))"
            out += ",\"adManagerClicks\":\(r.adManagerClicks),\"clicks\":\(r.clicks),\"clickDiscrepancy\":\(Self.number(r.clickDiscrepancy))"
            out += ",\"withinTolerance\":\(r.withinTolerance),\"duplicateImpressions\":\(r.duplicateImpressions)"
            out += ",\"givtImpressions\":\(r.givtImpressions),\"staleImpressions\":\(r.staleImpressions)"
            out += ",\"givtClicks\":\(r.givtClicks),\"duplicateClicks\":\(r.duplicateClicks)}"
        }
        return out + "]}"
    }

    private var cells: [[String]] {
        rows.map { r in
            [r.day, r.adUnit, String(r.adManagerImpressions), String(r.impressions), r.impressionDiscrepancy.map { String($0) } ?? "",
             String(r.adManagerClicks), String(r.clicks), r.clickDiscrepancy.map { String($0) } ?? "", String(r.withinTolerance),
             String(r.duplicateImpressions), String(r.givtImpressions), String(r.staleImpressions), String(r.givtClicks),
             String(r.duplicateClicks)]
        }
    }

    /// RFC 4180 CSV with the JSON rows' columns; a discrepancy without Ad Manager's count is empty.
    public var csv: String {
        var out = ReconciliationRow.columns.joined(separator: ",") + "\n"
        for row in cells { out += row.map(ReportResult.csvField).joined(separator: ",") + "\n" }
        return out
    }

    /// Aligned columns for a terminal; discrepancies as percentages, `-` without Ad Manager's count.
    public var table: String {
        let shown = rows.map { r -> [String] in
            func percent(_ d: Double?) -> String { d.map { String(oneDecimal: $0 * 100) + " %" } ?? "-" }
            return [r.day, r.adUnit, String(r.adManagerImpressions), String(r.impressions), percent(r.impressionDiscrepancy),
                    String(r.adManagerClicks), String(r.clicks), percent(r.clickDiscrepancy), r.withinTolerance ? "yes" : "NO",
                    String(r.duplicateImpressions), String(r.givtImpressions), String(r.staleImpressions), String(r.givtClicks),
                    String(r.duplicateClicks)]
        }
        var out = TextTable.render([ReconciliationRow.columns] + shown, rightAligned: Set(2..<ReconciliationRow.columns.count))
        if rows.isEmpty { out += "(no rows)\n" }
        return out
    }
}

extension String {
    /// A number with one decimal, without Foundation (`12.3`, `-0.5`).
    public init(oneDecimal value: Double) {
        let tenths = (value * 10).rounded()
        let sign = tenths < 0 ? "-" : ""
        let magnitude = Int64(abs(tenths))
        self = "\(sign)\(magnitude / 10).\(magnitude % 10)"
    }
}

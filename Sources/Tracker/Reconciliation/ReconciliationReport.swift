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
    /// The funnel's counts of the day and ad unit (PROTOCOL.md 10).
    public var requests: Int64
    public var loadedAds: Int64
    public var shownAds: Int64
    /// Ad Manager's requests and their discrepancy, when the import has a requests column.
    public var adManagerRequests: Int64?
    public var requestDiscrepancy: Double?

    /// The report's columns, in order; `withRequests` when the import has Ad Manager's requests.
    public static func columns(withRequests: Bool) -> [String] {
        ["day", "adUnit", "adManagerImpressions", "impressions", "impressionDiscrepancy", "adManagerClicks",
         "clicks", "clickDiscrepancy", "withinTolerance", "duplicateImpressions", "givtImpressions",
         "staleImpressions", "givtClicks", "duplicateClicks", "requests", "loadedAds", "shownAds"]
            + (withRequests ? ["adManagerRequests", "requestDiscrepancy"] : [])
    }
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
    /// zone) and ad unit: the summary report's impressions and clicks summed over formats. With
    /// `networks` (a scoped key), the imports and rows of those networks only.
    public func report(_ query: ReconciliationQuery, reports: Reports, networks: NetworkScope? = nil) async throws -> ReconciliationResult {
        try ReportError.checkFilter(query.adUnit, within: networks)
        guard let imported = try await load(id: query.importId, visibleTo: networks) else {
            throw ReconciliationError.noSuchImport(query.importId)
        }
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
        let tracker = try await trackerCounts(from: from, to: to, zone: imported.tz, includeTest: query.includeTest, adUnit: query.adUnit,
                                              reports: reports, networks: networks)
        let adManager = try await counts(of: imported.id, from: from, to: to).filter {
            (networks?.contains(adUnit: $0.key[1]) ?? true) && ReportQuery.filter(query.adUnit, keeps: $0.key[1])
        }
        let keys = Set(tracker.counts.keys).union(adManager.keys).sorted { a, b in
            a[0] != b[0] ? a[0] < b[0] : Array(a[1].utf8).lexicographicallyPrecedes(Array(b[1].utf8))
        }
        let rows = keys.map { key -> ReconciliationRow in
            let t = tracker.counts[key] ?? [:]
            let am = adManager[key] ?? AdManagerCounts()
            func count(_ measure: some ProjectionMeasure) -> Int64 { t[measure.name] ?? 0 }
            let impressions = count(FormatMeasure.impressions), clicks = count(FormatMeasure.clicks)
            let requests = count(FunnelMeasure.requests)
            let impressionDiscrepancy = Self.discrepancy(impressions, am.impressions)
            let clickDiscrepancy = Self.discrepancy(clicks, am.clicks)
            let requestDiscrepancy = imported.hasRequests ? Self.discrepancy(requests, am.requests) : nil
            func within(_ d: Double?, _ tracked: Int64) -> Bool {
                d.map { abs($0) <= query.threshold + 1e-12 } ?? (tracked == 0)
            }
            // Each discrepancy the row has: the requests' too when the file has them.
            let withinTolerance = within(impressionDiscrepancy, impressions) && within(clickDiscrepancy, clicks)
                && (!imported.hasRequests || within(requestDiscrepancy, requests))
            return ReconciliationRow(
                day: key[0], adUnit: key[1], adManagerImpressions: am.impressions, impressions: impressions,
                impressionDiscrepancy: impressionDiscrepancy, adManagerClicks: am.clicks, clicks: clicks, clickDiscrepancy: clickDiscrepancy,
                withinTolerance: withinTolerance,
                duplicateImpressions: count(FormatMeasure.duplicateImpressions), givtImpressions: count(FormatMeasure.givtImpressions),
                staleImpressions: count(FormatMeasure.staleImpressions), givtClicks: count(FormatMeasure.givtClicks),
                duplicateClicks: count(FormatMeasure.duplicateClicks), requests: requests,
                loadedAds: count(FunnelMeasure.loadedAds), shownAds: count(FunnelMeasure.shownAds),
                adManagerRequests: imported.hasRequests ? am.requests : nil, requestDiscrepancy: requestDiscrepancy)
        }
        return ReconciliationResult(from: from, to: to, imported: imported, threshold: query.threshold, ivtRules: tracker.ivtRules,
                                    rows: rows, lag: tracker.lag)
    }

    /// The measures the reconciliation shows beside Ad Manager's counts: the summary report's
    /// and the funnel report's, by local day and ad unit (summed over formats).
    static let summaryMeasures: [FormatMeasure] = [.impressions, .clicks, .duplicateImpressions, .givtImpressions, .staleImpressions,
                                                   .givtClicks, .duplicateClicks]
    static let funnelMeasures: [FunnelMeasure] = [.requests, .loadedAds, .shownAds]

    /// The tracker's counts by local day and ad unit, each measure by its report name.
    private func trackerCounts(from: Day, to: Day, zone: String, includeTest: Bool, adUnit: String?, reports: Reports,
                               networks: NetworkScope?) async throws
        -> (counts: [[String]: [String: Int64]], ivtRules: Int, lag: ProjectionLag) {
        var counts: [[String]: [String: Int64]] = [:]
        var ivtRules = 0, lag = ProjectionLag(events: 0, seconds: 0)
        for (kind, names) in [(ReportKind.summary, Self.summaryMeasures.map(\.name)), (.funnel, Self.funnelMeasures.map(\.name))] {
            let result: ReportResult
            do {
                result = try await reports.run(try ReportQuery(kind: kind, from: from, to: to, adUnit: adUnit, includeTest: includeTest,
                                                               timeZone: zone),
                                               networks: networks)
            } catch let error as ReportQueryError {
                throw ReconciliationError.invalidParameter(error.description)
            }
            let column = Dictionary(uniqueKeysWithValues: result.columns.enumerated().map { ($1, $0) })
            guard let dayColumn = column["day"], let unitColumn = column[ProjectionDimension.adUnit.rawValue] else { continue }
            for row in result.rows {
                guard case .text(let day) = row[dayColumn], case .text(let unit) = row[unitColumn] else { continue }
                for name in names {
                    if let c = column[name], case .count(let n) = row[c] { counts[[day, unit], default: [:]][name, default: 0] += n }
                }
            }
            if kind == .summary { (ivtRules, lag) = (result.ivtRules, result.lag) }
        }
        return (counts.filter { $0.value.values.contains { $0 != 0 } }, ivtRules, lag)
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
            out += ",\"givtClicks\":\(r.givtClicks),\"duplicateClicks\":\(r.duplicateClicks)"
            out += ",\"requests\":\(r.requests),\"loadedAds\":\(r.loadedAds),\"shownAds\":\(r.shownAds)"
            if imported.hasRequests {
                out += ",\"adManagerRequests\":\(r.adManagerRequests ?? 0),\"requestDiscrepancy\":\(Self.number(r.requestDiscrepancy))"
            }
            out += "}"
        }
        return out + "]}"
    }

    /// The report's columns for this import.
    public var columns: [String] { ReconciliationRow.columns(withRequests: imported.hasRequests) }

    /// Each row's cells, and which of them are text (the day and the ad unit; the rest are numbers).
    private var cells: [[String]] {
        rows.map { r in
            [r.day, r.adUnit, String(r.adManagerImpressions), String(r.impressions), r.impressionDiscrepancy.map { String($0) } ?? "",
             String(r.adManagerClicks), String(r.clicks), r.clickDiscrepancy.map { String($0) } ?? "", String(r.withinTolerance),
             String(r.duplicateImpressions), String(r.givtImpressions), String(r.staleImpressions), String(r.givtClicks),
             String(r.duplicateClicks), String(r.requests), String(r.loadedAds), String(r.shownAds)]
                + (imported.hasRequests ? [String(r.adManagerRequests ?? 0), r.requestDiscrepancy.map { String($0) } ?? ""] : [])
        }
    }

    /// RFC 4180 CSV with the JSON rows' columns; a discrepancy without Ad Manager's count is
    /// empty. The text cells follow the reports' rule against formulas (a negative discrepancy
    /// is a number, written as it is).
    public var csv: String {
        var out = columns.joined(separator: ",") + "\n"
        for row in cells {
            out += row.enumerated().map { $0.offset < 2 ? ReportResult.csvField($0.element) : $0.element }.joined(separator: ",") + "\n"
        }
        return out
    }

    /// Aligned columns for a terminal; discrepancies as percentages, `-` without Ad Manager's count.
    public var table: String {
        let shown = rows.map { r -> [String] in
            func percent(_ d: Double?) -> String { d.map { String(oneDecimal: $0 * 100) + " %" } ?? "-" }
            return [r.day, r.adUnit, String(r.adManagerImpressions), String(r.impressions), percent(r.impressionDiscrepancy),
                    String(r.adManagerClicks), String(r.clicks), percent(r.clickDiscrepancy), r.withinTolerance ? "yes" : "NO",
                    String(r.duplicateImpressions), String(r.givtImpressions), String(r.staleImpressions), String(r.givtClicks),
                    String(r.duplicateClicks), String(r.requests), String(r.loadedAds), String(r.shownAds)]
                + (imported.hasRequests ? [String(r.adManagerRequests ?? 0), percent(r.requestDiscrepancy)] : [])
        }
        var out = TextTable.render([columns] + shown, rightAligned: Set(2..<columns.count))
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

import Foundation
import Tracker

/// PROTOCOL.md sections 5 and 6 computed the plain way, straight from the text, over every stored
/// event at once: no projections, no incremental updates, and no code shared with
/// `AdContribution`. The property tests hold the tracker's reports against this.
enum ReferenceReports {
    static let testAdUnits: Set<String> = [
        "/6499/example/native", "/6499/example/native-backfill",
        "/21775744923/example/native", "/21775744923/example/native-backfill",
    ]

    static let columns: [ReportKind: (dimensions: [String], measures: [String])] = [
        .summary: (["day", "adUnit", "formatId"],
                   ["impressions", "duplicateImpressions", "staleImpressions", "clicks", "duplicateClicks",
                    "attributedClicks", "unattributedClicks", "ctr", "adchoicesImpressions", "adchoicesClicks",
                    "videoPlays", "videoEnds", "givtImpressions", "givtClicks"]),
        .assets: (["day", "adUnit", "formatId", "assetKey"],
                  ["clicks", "duplicateClicks", "attributedClicks", "noImpression", "beforeImpression", "outsideWindow"]),
        .sources: (["day", "adUnit", "adapter"],
                   ["appImpressions", "sdkImpressions", "mediationImpressions", "doubleTrackedImpressionAds",
                    "doubleTrackedClickAds"]),
        .adchoices: (["day", "adUnit", "formatId"], ["eeaReservationImpressions", "withAdChoices", "share", "adchoicesClicks"]),
        .ivt: (["day", "adUnit", "formatId", "label"], ["impressions", "clicks", "events"]),
        .funnel: (["day", "adUnit"], ["requests", "adsRequested", "filledRequests", "failedRequests", "unansweredRequests", "fillRate",
                                      "loadedAds", "shownAds", "showRate", "loadLatencyP50Ms", "loadLatencyP95Ms"]),
        .failures: (["day", "adUnit", "errorCode"], ["failedRequests"]),
        .waterfall: (["day", "adUnit", "adapter", "position"], ["attempts", "loaded", "failed", "timeouts", "fillRate", "latencyP50Ms",
                                                               "latencyP95Ms"]),
    ]

    /// Dimensions whose values are integers, sorted by value.
    static let integerDimensions: Set<String> = ["position"]

    /// PROTOCOL.md 10's bucket upper bounds in milliseconds.
    static let latencyBounds = [10, 20, 30, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 4000, 5000, 7500,
                                10000, 15000, 20000, 30000, 60000, 600_000]

    /// The `p`th percentile read from the buckets: the value of rank ceil(p / 100 × n) among the
    /// sorted values, rounded up to its bucket's bound; empty (CSV's null) without values.
    static func percentile(_ p: Int, _ values: [Int]) -> String {
        guard !values.isEmpty else { return "" }
        let rank = Int((Double(p) * Double(values.count) / 100).rounded(.up))
        let value = values.sorted()[max(rank, 1) - 1]
        return String(latencyBounds.first { value <= $0 }!)
    }

    /// An invalid-traffic rule set, applied the plain way: every pattern tried on every user
    /// agent with Foundation's regular expressions, every range checked bit by bit.
    struct Rules {
        var patterns: [String] = []
        /// Patterns that judge beacons only, not app events.
        var appExemptions: Set<String> = []
        /// The stored events that came as beacons (the rest were sent to /v1/events).
        var beacons: Set<PackedUUID> = []
        var ranges: [(address: [UInt8], bits: Int)] = []
        var maxClicksPerAd: Int?
        var maxEventsPerClientMinute: Int?

        static let none = Rules()

        init(patterns: [String] = [], appExemptions: Set<String> = [], beacons: Set<PackedUUID> = [], ranges: [String] = [],
             maxClicksPerAd: Int? = nil, maxEventsPerClientMinute: Int? = nil) {
            self.patterns = patterns
            self.appExemptions = appExemptions
            self.beacons = beacons
            self.ranges = ranges.map { text in
                let parts = text.split(separator: "/")
                let address = IPAddress(parts[0])!.bytes
                return (address, parts.count > 1 ? Int(parts[1])! : address.count * 8)
            }
            self.maxClicksPerAd = maxClicksPerAd
            self.maxEventsPerClientMinute = maxEventsPerClientMinute
        }

        func isBot(_ agent: String?, beacon: Bool) -> Bool {
            guard let agent else { return false }
            return patterns.contains { p in
                guard beacon || !appExemptions.contains(p) else { return false }
                let regex = try! NSRegularExpression(pattern: p, options: [.caseInsensitive])
                return regex.firstMatch(in: agent, range: NSRange(agent.startIndex..., in: agent)) != nil
            }
        }

        func isDatacenter(_ ip: IPAddress?) -> Bool {
            guard let ip else { return false }
            let bytes = ip.bytes
            return ranges.contains { r in
                guard r.address.count == bytes.count else { return false }
                for bit in 0..<r.bits where (bytes[bit / 8] >> (7 - bit % 8)) & 1 != (r.address[bit / 8] >> (7 - bit % 8)) & 1 {
                    return false
                }
                return true
            }
        }

        /// Each stored event's label, the first that applies (`excessive_clicks` is per ad, later).
        func labels(_ stored: [TrackingEvent]) -> [PackedUUID: String] {
            var groups: [String: Int] = [:]
            func group(_ e: TrackingEvent) -> String? {
                guard let agent = e.userAgent, let ip = e.clientIP else { return nil }
                return "\(e.receivedAt.microseconds / 60_000_000)|\(agent)|\(ip)"
            }
            if maxEventsPerClientMinute != nil {
                for e in stored { if let g = group(e) { groups[g, default: 0] += 1 } }
            }
            var out: [PackedUUID: String] = [:]
            for e in stored {
                if isBot(e.userAgent, beacon: beacons.contains(e.id)) { out[e.id] = "declared_bot" }
                else if isDatacenter(e.clientIP) { out[e.id] = "datacenter" }
                else if let limit = maxEventsPerClientMinute, let g = group(e), groups[g]! > limit { out[e.id] = "high_rate" }
            }
            return out
        }
    }

    /// The CSV of every report (keys as in `TestDatabase.reportsAsCSV`), over all days: UTC days,
    /// or the local days or hours of `clock`.
    static func csv(_ stored: [TrackingEvent], window: Duration = .seconds(3600), clock: LocalClock = .utcDays,
                    rules: Rules = .none) -> [String: String] {
        var out: [String: String] = [:]
        for includeTest in [false, true] {
            let tables = compute(stored, includeTest: includeTest, windowMicros: window.microseconds, clock: clock, rules: rules)
            for kind in ReportKind.allCases {
                out["\(kind.rawValue) includeTest=\(includeTest)"] = render(kind, tables[kind] ?? [:], hourly: clock.hourly)
            }
        }
        return out
    }

    /// Where an instant falls for a report: its local day, and its local hour when by hour.
    /// Computed with Foundation's time zones (ICU's copy of the tz database), not PostgreSQL's.
    struct LocalClock {
        var name: String
        var zone: TimeZone
        var hourly: Bool

        static let utcDays = LocalClock("UTC", hourly: false)

        init(_ name: String, hourly: Bool) {
            self.name = name
            self.zone = TimeZone(identifier: name)!
            self.hourly = hourly
        }

        /// `[day]` or `[day, hour]`: the local date, and the hour's local start with the zone's
        /// offset at that instant (`Z` for UTC).
        func key(_ t: Timestamp) -> [String] {
            let date = Date(timeIntervalSince1970: TimeInterval(t.microseconds / 1_000_000))
                + TimeInterval(t.microseconds % 1_000_000) / 1_000_000
            let offset = zone.secondsFromGMT(for: date)
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = zone
            let c = calendar.dateComponents([.year, .month, .day, .hour], from: date)
            let day = String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!)
            guard hourly else { return [day] }
            let zoneText = name == "UTC" ? "Z"
                : String(format: "%@%02d:%02d", offset < 0 ? "-" : "+", abs(offset) / 3600, abs(offset) % 3600 / 60)
            return [day, String(format: "%@T%02d:00:00%@", day, c.hour!, zoneText)]
        }
    }

    /// Rows keyed by their dimension values, each a bag of named counts.
    typealias Table = [[String]: [String: Int64]]

    static func compute(_ stored: [TrackingEvent], includeTest: Bool, windowMicros: Int64, clock: LocalClock = .utcDays,
                        rules: Rules = .none) -> [ReportKind: Table] {
        var summary = Table(), assets = Table(), sources = Table(), adchoices = Table(), ivt = Table()
        var funnel = Table(), failures = Table(), waterfall = Table()
        /// The row's time dimensions, joined; split again by `render`.
        func day(_ e: TrackingEvent) -> String { clock.key(e.correctedAt).joined(separator: ",") }
        func bump(_ t: inout Table, _ key: [String], _ name: String) { t[key, default: [:]][name, default: 0] += 1 }
        func earlier(_ a: TrackingEvent, _ b: TrackingEvent) -> Bool {
            a.correctedAt.microseconds != b.correctedAt.microseconds
                ? a.correctedAt.microseconds < b.correctedAt.microseconds : a.id.text < b.id.text
        }

        let labels = rules.labels(stored)
        func labelled(_ e: TrackingEvent, _ label: String) {
            bump(&ivt, [day(e), e.adUnit, e.formatId, label], "events")
            if e.type == .impression {
                bump(&ivt, [day(e), e.adUnit, e.formatId, label], "impressions")
                bump(&summary, [day(e), e.adUnit, e.formatId], "givtImpressions")
            }
            if e.type == .click {
                bump(&ivt, [day(e), e.adUnit, e.formatId, label], "clicks")
                bump(&summary, [day(e), e.adUnit, e.formatId], "givtClicks")
            }
        }
        let kept = stored.filter { includeTest || !($0.test || testAdUnits.contains($0.adUnit)) }
        for e in kept { if let label = labels[e.id] { labelled(e, label) } }
        let events = kept.filter { labels[$0.id] == nil }
        computeFunnel(events, day: day, funnel: &funnel, failures: &failures, waterfall: &waterfall)
        let ads = Dictionary(grouping: events.filter { !$0.type.isLoadEvent }, by: \.logKey)
        for (_, adEvents) in ads {
            let ofType = { (t: EventType) in adEvents.filter { $0.type == t }.sorted(by: earlier) }
            let impressions = ofType(.impression)
            let clicks = ofType(.click)
            let loads = ofType(.adLoaded)
            let adchoicesImpressions = ofType(.adchoicesImpression)

            // Impressions: the earliest counts, every other one is a duplicate, each by source.
            for (i, imp) in impressions.enumerated() {
                bump(&summary, [day(imp), imp.adUnit, imp.formatId], i == 0 ? "impressions" : "duplicateImpressions")
                bump(&sources, [day(imp), imp.adUnit, imp.adapter ?? ""], imp.source.rawValue + "Impressions")
            }
            let counted = impressions.first
            if let imp = counted {
                let key = [day(imp), imp.adUnit, imp.formatId]
                if let load = loads.first, imp.correctedAt.microseconds - load.correctedAt.microseconds > 3_600_000_000 {
                    bump(&summary, key, "staleImpressions")
                }
                if Set(impressions.map(\.source)).count > 1 {
                    bump(&sources, [day(imp), imp.adUnit, imp.adapter ?? ""], "doubleTrackedImpressionAds")
                }
                if imp.eea && imp.reservation {
                    bump(&adchoices, key, "eeaReservationImpressions")
                    if !adchoicesImpressions.isEmpty { bump(&adchoices, key, "withAdChoices") }
                }
            }
            if let first = clicks.first, Set(clicks.map(\.source)).count > 1 {
                bump(&sources, [day(first), first.adUnit, first.adapter ?? ""], "doubleTrackedClickAds")
            }

            // Clicks, asset by asset, in order; a click within 1 s of the last counted one is a duplicate.
            var countedClicks: [TrackingEvent] = []
            for asset in Set(clicks.compactMap(\.assetKey)) {
                var lastCounted: Int64?
                for c in clicks where c.assetKey == asset {
                    let t = c.correctedAt.microseconds
                    if let last = lastCounted, t - last <= 1_000_000 {
                        bump(&summary, [day(c), c.adUnit, c.formatId], "duplicateClicks")
                        bump(&assets, [day(c), c.adUnit, c.formatId, asset], "duplicateClicks")
                        continue
                    }
                    lastCounted = t
                    countedClicks.append(c)
                }
            }
            // Then the ad's counted clicks beyond the first maxClicksPerAd are excessive.
            countedClicks.sort(by: earlier)
            if let limit = rules.maxClicksPerAd, countedClicks.count > limit {
                for c in countedClicks[limit...] { labelled(c, "excessive_clicks") }
                countedClicks = Array(countedClicks[..<limit])
            }
            for c in countedClicks {
                let t = c.correctedAt.microseconds
                let asset = c.assetKey!
                let summaryKey = [day(c), c.adUnit, c.formatId]
                let assetKey = [day(c), c.adUnit, c.formatId, asset]
                bump(&summary, summaryKey, "clicks")
                bump(&assets, assetKey, "clicks")
                let reason: String
                if let imp = counted {
                    let i = imp.correctedAt.microseconds
                    if t < i - 1_000_000 { reason = "beforeImpression" }
                    else if t > i + windowMicros { reason = "outsideWindow" }
                    else { reason = "attributedClicks" }
                } else {
                    reason = "noImpression"
                }
                bump(&assets, assetKey, reason)
                if reason == "attributedClicks" { bump(&summary, summaryKey, "attributedClicks") }
            }

            if let first = adchoicesImpressions.first {
                bump(&summary, [day(first), first.adUnit, first.formatId], "adchoicesImpressions")
            }
            for c in ofType(.adchoicesClick) {
                bump(&summary, [day(c), c.adUnit, c.formatId], "adchoicesClicks")
                bump(&adchoices, [day(c), c.adUnit, c.formatId], "adchoicesClicks")
            }
            if let play = ofType(.videoPlay).first { bump(&summary, [day(play), play.adUnit, play.formatId], "videoPlays") }
            if let end = ofType(.videoEnd).first { bump(&summary, [day(end), end.adUnit, end.formatId], "videoEnds") }
        }

        for (key, var row) in summary {
            row["unattributedClicks"] = (row["clicks"] ?? 0) - (row["attributedClicks"] ?? 0)
            summary[key] = row
        }
        return [.summary: summary, .assets: assets, .sources: sources, .adchoices: adchoices, .ivt: ivt, .funnel: funnel,
                .failures: failures, .waterfall: waterfall]
    }

    /// PROTOCOL.md 10 over the valid events: loads, loaded ads and mediation attempts. Latencies
    /// go to the row as "latency:…" lists of values, read by `render`.
    static func computeFunnel(_ events: [TrackingEvent], day: (TrackingEvent) -> String, funnel: inout Table, failures: inout Table,
                              waterfall: inout Table) {
        func earlier(_ a: TrackingEvent, _ b: TrackingEvent) -> Bool {
            a.correctedAt.microseconds != b.correctedAt.microseconds
                ? a.correctedAt.microseconds < b.correctedAt.microseconds : a.id.text < b.id.text
        }
        func bump(_ t: inout Table, _ key: [String], _ name: String, _ by: Int64 = 1) { t[key, default: [:]][name, default: 0] += by }
        var latencies: [String: [[String]: [Int]]] = [:]
        let loaded = events.filter { $0.type == .adLoaded }
        let filledLoads = Set(loaded.compactMap(\.loadId))
        // Loads: requested by their earliest ad_request; filled, failed or unanswered.
        for (loadId, loadEvents) in Dictionary(grouping: events.filter(\.type.isLoadEvent), by: { $0.loadId! }) {
            let requests = loadEvents.filter { $0.type == .adRequest }.sorted(by: earlier)
            if let request = requests.first {
                let key = [day(request), request.adUnit]
                bump(&funnel, key, "requests")
                bump(&funnel, key, "adsRequested", Int64(request.adsRequested ?? 1))
                let failures_ = loadEvents.filter { $0.type == .adFailed }.sorted(by: earlier)
                if filledLoads.contains(loadId) {
                    bump(&funnel, key, "filledRequests")
                } else if let failure = failures_.first {
                    bump(&funnel, key, "failedRequests")
                    bump(&failures, key + [failure.errorCode!.rawValue], "failedRequests")
                } else {
                    bump(&funnel, key, "unansweredRequests")
                }
            }
            // Mediation attempts: one per adapter and position, by its earliest result.
            let results = loadEvents.filter { $0.type == .mediationResult }
            for (_, answers) in Dictionary(grouping: results, by: { [$0.adapter ?? "", String($0.position!)] }) {
                let first = answers.sorted(by: earlier)[0]
                let key = [day(first), first.adUnit, first.adapter ?? "", String(first.position!)]
                bump(&waterfall, key, "attempts")
                bump(&waterfall, key, first.result == .loaded ? "loaded" : first.result == .failed ? "failed" : "timeouts")
                if let ms = first.latencyMs { latencies["waterfall", default: [:]][key, default: []].append(ms) }
            }
        }
        // Loaded ads: by their earliest ad_loaded; shown when the ad has a counted impression.
        let impressed = Set(events.filter { $0.type == .impression }.map(\.logKey))
        for (ad, loads) in Dictionary(grouping: loaded, by: \.logKey) {
            let first = loads.sorted(by: earlier)[0]
            let key = [day(first), first.adUnit]
            bump(&funnel, key, "loadedAds")
            if impressed.contains(ad) { bump(&funnel, key, "shownAds") }
            if let ms = first.latencyMs { latencies["funnel", default: [:]][key, default: []].append(ms) }
        }
        for (key, values) in latencies["funnel"] ?? [:] {
            funnel[key, default: [:]]["latency:" + values.map(String.init).joined(separator: " "), default: 0] = 0
        }
        for (key, values) in latencies["waterfall"] ?? [:] {
            waterfall[key, default: [:]]["latency:" + values.map(String.init).joined(separator: " "), default: 0] = 0
        }
    }

    /// Rows sorted by their dimensions (byte order), one per combination with a non-zero count.
    static func render(_ kind: ReportKind, _ table: Table, hourly: Bool = false) -> String {
        var (dimensions, measures) = columns[kind]!
        if hourly { dimensions.insert("hour", at: 1) }
        var out = (dimensions + measures).joined(separator: ",") + "\n"
        // A time key is "day" or "day,hour": split it so each dimension sorts on its own.
        let table = Dictionary(uniqueKeysWithValues: table.map { key, row in
            (key[0].split(separator: ",").map(String.init) + key.dropFirst(), row)
        })
        let integer = dimensions.map { integerDimensions.contains($0) }
        let keys = table.keys.sorted { a, b in
            for (i, (x, y)) in zip(a, b).enumerated() where x != y {
                return integer[i] ? Int(x)! < Int(y)! : Array(x.utf8).lexicographicallyPrecedes(Array(y.utf8))
            }
            return false
        }
        for key in keys {
            let row = table[key]!
            guard row.contains(where: { !$0.key.hasPrefix("latency:") && $0.value != 0 }) else { continue }
            let latencies = row.keys.first { $0.hasPrefix("latency:") }.map { $0.dropFirst(8).split(separator: " ").map { Int($0)! } } ?? []
            let cells = measures.map { name -> String in
                switch name {
                case "ctr": ratio(row["attributedClicks"] ?? 0, row["impressions"] ?? 0)
                case "share": ratio(row["withAdChoices"] ?? 0, row["eeaReservationImpressions"] ?? 0)
                case "fillRate" where kind == .funnel: ratio(row["filledRequests"] ?? 0, row["requests"] ?? 0)
                case "fillRate": ratio(row["loaded"] ?? 0, row["attempts"] ?? 0)
                case "showRate": ratio(row["shownAds"] ?? 0, row["loadedAds"] ?? 0)
                case "loadLatencyP50Ms", "latencyP50Ms": percentile(50, latencies)
                case "loadLatencyP95Ms", "latencyP95Ms": percentile(95, latencies)
                default: String(row[name] ?? 0)
                }
            }
            out += (key + cells).joined(separator: ",") + "\n"
        }
        return out
    }

    /// A ratio as CSV writes it: empty without a denominator.
    static func ratio(_ a: Int64, _ b: Int64) -> String {
        b == 0 ? "" : String(Double(a) / Double(b))
    }
}

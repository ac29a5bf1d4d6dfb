/// What a set of ads adds to the projection tables: a sum of rows, signed.
public struct Contribution: Sendable, Equatable {
    public private(set) var rows: [ProjectionKey: Measures] = [:]

    public init() {}

    mutating func add<M: ProjectionMeasure>(_ key: ProjectionKey, _ measure: M, _ amount: Int64 = 1) {
        assert(key.table == M.table, "a \(M.table) measure on a \(key.table) row")
        rows[key, default: Measures()][measure.lane] &+= amount
    }

    /// Counts in several measures of one row with one lookup: a verdict often counts a thing in
    /// more than one measure of a row, and finding the row (hashing its key's strings) is what
    /// a count costs. `count` may count only the measures of the row's table.
    mutating func update<M: ProjectionMeasure>(_ key: ProjectionKey, _: M.Type, _ count: (inout RowCounts<M>) -> Void) {
        assert(key.table == M.table, "\(M.table) measures on a \(key.table) row")
        var row = RowCounts<M>()
        count(&row)
        rows[key, default: Measures()] &+= row.measures
    }

    public mutating func add(_ other: Contribution) {
        // An empty sum shares the other's dictionary rather than copy it row by row: the
        // rebuild's sum often starts from one large file's contribution.
        if rows.isEmpty {
            rows = other.rows
            return
        }
        for (k, v) in other.rows { rows[k, default: Measures()] &+= v }
    }

    /// Adds one row's measures (a row read back from a `RowSpill`).
    mutating func add(_ key: ProjectionKey, _ values: Measures) {
        rows[key, default: Measures()] &+= values
    }

    public mutating func subtract(_ other: Contribution) {
        for (k, v) in other.rows { rows[k, default: Measures()] &-= v }
    }

    /// Drops rows whose every measure is zero (a change that cancelled out).
    public mutating func removeZeros() {
        rows = rows.filter { $0.value != Measures() }
    }
}

/// What a verdict counts in one row of a table whose measures are `M`.
struct RowCounts<M: ProjectionMeasure> {
    private(set) var measures = Measures()

    mutating func count(_ measure: M, _ amount: Int64 = 1) {
        measures[measure.lane] &+= amount
    }
}

/// The report rules (PROTOCOL.md section 5) for one ad: the rows its events add to the projections.
///
/// A pure function of the ad's events, in any order, so projections built incrementally
/// (subtract the ad's old contribution, add its new one) equal projections rebuilt from
/// the log, and late events correct exactly the numbers they affect.
public struct AdContribution: Sendable {
    /// How long after its impression a click is still attributed (PROTOCOL.md: default 1 hour).
    public var attributionWindow: Duration
    /// Clicks this close to the ad's impression but before it still count (PROTOCOL.md: 1 s).
    public static let clockTolerance: Duration = .seconds(1)
    /// A second click of the same ad and asset within this time is a duplicate (PROTOCOL.md: 1 s).
    public static let duplicateClickGap: Duration = .seconds(1)
    /// An impression this long after the ad loaded is stale (PROTOCOL.md: 1 hour).
    public static let staleAfter: Duration = .seconds(3600)
    /// A click counts for the impression before it up to this long after it (PROTOCOL.md: default
    /// 1 hour; `TRACKER_ATTRIBUTION_WINDOW`).
    public static let defaultAttributionWindow: Duration = .seconds(3600)

    /// A click of an ad beyond this many counted ones is `excessive_clicks` (the rule set's
    /// `maxClicksPerAd`; `nil`: the rule is off).
    public var maxClicksPerAd: Int?

    public init(attributionWindow: Duration = Self.defaultAttributionWindow, maxClicksPerAd: Int? = nil) {
        self.attributionWindow = attributionWindow
        self.maxClicksPerAd = maxClicksPerAd
    }

    /// The contribution of one ad (all `events` share one requestId).
    public func contribution(of events: [AdEvent]) -> Contribution {
        var out = Contribution()
        accumulate(events, into: &out)
        return out
    }

    /// Adds the contribution of one state's events to `out`: the rebuild sums millions of ads
    /// this way without a dictionary per ad.
    ///
    /// A state holds an ad's events, a load's (its own and its load references), or both when an
    /// ad and a load share a key: each part is judged by its own rules.
    public func accumulate(_ events: [AdEvent], into out: inout Contribution) {
        guard events.contains(where: \.isLoadPart) else {
            accumulate(events, into: &out) { self.fold($0, into: &$1) }
            return
        }
        let ad = events.filter { !$0.isLoadPart }
        if !ad.isEmpty { accumulate(ad, into: &out) { self.fold($0, into: &$1) } }
        accumulate(events.filter(\.isLoadPart), into: &out) { self.foldLoad($0, into: &$1) }
    }

    /// The rows of `events` under each traffic class they belong to (`TrafficClass`).
    private func accumulate(_ events: [AdEvent], into out: inout Contribution,
                            by rules: ([AdEvent], inout ContributionRows) -> Void) {
        func add(_ events: [AdEvent], as cls: TrafficClass) {
            var rows = ContributionRows(trafficClass: cls)
            swap(&rows.out, &out)  // lend `out` to the sink without copying its dictionary
            rules(events, &rows)
            swap(&rows.out, &out)
        }
        if events.contains(where: \.isTest) {
            add(events, as: .withTest)
            let nonTest = events.filter { !$0.isTest }
            if !nonTest.isEmpty { add(nonTest, as: .withoutTest) }
        } else {
            add(events, as: .plain)
        }
    }

    /// The report rules (PROTOCOL.md 5) over the events of one ad (one traffic class): tells `verdicts` what each event
    /// became. The projections (`ContributionRows`) and the audit trail (`AdExplanation`) both
    /// consume this, so the rules exist once.
    func fold<Verdicts: AdVerdicts>(_ events: [AdEvent], into verdicts: inout Verdicts) {
        let sorted = events.inRulesOrder
        var countedImpression: AdEvent?
        var impressionSources = SourceSet()
        var firstLoaded: AdEvent?
        var firstAdchoicesImpression: AdEvent?
        var firstVideoPlay: AdEvent?
        var firstVideoEnd: AdEvent?
        var firstClick: AdEvent?
        var clickSources = SourceSet()
        // By the asset key's bytes: Swift's `String ==` would take two keys that differ only in
        // their Unicode normalisation for one, where the report rows keep them apart.
        var clicksByAsset: [[UInt8]: [AdEvent]] = [:]

        for e in sorted {
            // A labelled event takes no part in the report rules: the others are judged as if it did not exist.
            if let label = e.label {
                verdicts.labelled(e, label)
                continue
            }
            switch e.type {
            case .impression:
                if let first = countedImpression {
                    verdicts.duplicateImpression(e, of: first)
                } else {
                    countedImpression = e
                    verdicts.countedImpression(e)
                }
                impressionSources.insert(e.source)
            case .adLoaded:
                verdicts.adLoaded(e, earliest: firstLoaded == nil)
                if firstLoaded == nil { firstLoaded = e }
            case .click:
                if firstClick == nil { firstClick = e }
                clickSources.insert(e.source)
                clicksByAsset[Array((e.assetKey ?? "").utf8), default: []].append(e)
            case .adchoicesImpression:
                if let first = firstAdchoicesImpression {
                    verdicts.duplicateAdchoicesImpression(e, of: first)
                } else {
                    firstAdchoicesImpression = e
                    verdicts.countedAdchoicesImpression(e)
                }
            case .adchoicesClick:
                verdicts.adchoicesClick(e)
            case .videoPlay:
                verdicts.video(e, countedAs: firstVideoPlay == nil ? .videoPlays : nil)
                if firstVideoPlay == nil { firstVideoPlay = e }
            case .videoEnd:
                verdicts.video(e, countedAs: firstVideoEnd == nil ? .videoEnds : nil)
                if firstVideoEnd == nil { firstVideoEnd = e }
            case .videoPause, .videoMute, .videoUnmute:
                verdicts.video(e, countedAs: nil)
            case .adRequest, .adFailed, .mediationResult:
                break  // a load's (`foldLoad`)
            }
        }

        if let loaded = firstLoaded {
            verdicts.loadedAd(loaded, shown: countedImpression != nil)
        }

        if let impression = countedImpression {
            let stale = firstLoaded.map { impression.correctedAt - $0.correctedAt > Self.staleAfter } ?? false
            verdicts.countedImpressionFacts(impression, stale: stale, doubleTracked: impressionSources.count > 1,
                                            withAdChoices: firstAdchoicesImpression != nil)
        }
        if let click = firstClick, clickSources.count > 1 {
            verdicts.doubleTrackedClicks(firstClick: click)
        }

        // The duplicate-click rule first, asset by asset, over every valid click.
        var counted: [AdEvent] = []
        for (_, clicks) in clicksByAsset {
            var lastCounted: AdEvent?
            for c in clicks {  // already in the rules' order: sorted above
                if let last = lastCounted, c.correctedAt - last.correctedAt <= Self.duplicateClickGap {
                    verdicts.duplicateClick(c, of: last)
                    continue
                }
                lastCounted = c
                counted.append(c)
            }
        }
        // Then the ad's counted clicks beyond the first maxClicksPerAd are invalid traffic, and
        // attribution considers the first ones only.
        if let limit = maxClicksPerAd, counted.count > limit {
            counted.sort(by: AdEvent.earlier)
            for c in counted[limit...] { verdicts.labelled(c, .excessiveClicks) }
            counted.removeSubrange(limit...)
        }
        for c in counted {
            guard let impression = countedImpression else {
                verdicts.countedClick(c, .unattributed(.noImpression))
                continue
            }
            if c.correctedAt < impression.correctedAt - Self.clockTolerance {
                verdicts.countedClick(c, .unattributed(.beforeImpression))
            } else if c.correctedAt > impression.correctedAt + attributionWindow {
                verdicts.countedClick(c, .unattributed(.outsideWindow))
            } else {
                verdicts.countedClick(c, .attributed(to: impression.id))
            }
        }
    }
}

extension AdContribution {
    /// The funnel's rules (PROTOCOL.md 10) over the events of one load (one traffic class): its
    /// `ad_request`, `ad_failed` and `mediation_result` events and its load references (the
    /// `ad_loaded` events that name it). Tells `verdicts` what each became.
    func foldLoad<Verdicts: LoadVerdicts>(_ events: [AdEvent], into verdicts: inout Verdicts) {
        let sorted = events.inRulesOrder
        var request: AdEvent?
        var failures: [AdEvent] = []
        var filled = false
        // One attempt per adapter (by its bytes, as the report rows tell them apart) and position.
        var attempts: [AttemptKey: AdEvent] = [:]
        for e in sorted {
            // A labelled event takes no part: the others are judged as if it did not exist.
            if let label = e.label {
                verdicts.labelled(e, label)
                continue
            }
            if e.isLoadReference {
                filled = true
                verdicts.fill(e)
                continue
            }
            switch e.type {
            case .adRequest:
                if let first = request { verdicts.repeatedRequest(e, of: first) } else { request = e }
            case .adFailed:
                failures.append(e)
            case .mediationResult:
                let key = AttemptKey(adapter: Array((e.adapter ?? "").utf8), position: e.position ?? 0)
                if let first = attempts[key] {
                    verdicts.repeatedAttempt(e, of: first)
                } else {
                    attempts[key] = e
                    verdicts.attempt(e)
                }
            default:
                break
            }
        }
        let outcome: LoadOutcome = filled ? .filled : failures.first.map { .failed($0.errorCode ?? .other) } ?? .unanswered
        if let request { verdicts.requested(request, outcome: outcome) }
        for (i, failure) in failures.enumerated() {
            verdicts.failure(failure, counted: request != nil && !filled && i == 0)
        }
    }

    private struct AttemptKey: Hashable {
        var adapter: [UInt8]
        var position: Int
    }
}

/// What became of a requested load (PROTOCOL.md 10).
public enum LoadOutcome: Sendable, Hashable {
    /// An `ad_loaded` event names it.
    case filled
    /// Not filled, and it has an `ad_failed` event: the error of its earliest.
    case failed(AdErrorCode)
    /// Neither.
    case unanswered

    /// The outcome's name in the API.
    public var name: String {
        switch self {
        case .filled: "filled"
        case .failed: "failed"
        case .unanswered: "unanswered"
        }
    }
}

/// The sources an ad's impressions or clicks came from: a bit per source, no allocation.
struct SourceSet {
    private var bits: UInt8 = 0

    mutating func insert(_ source: EventSource) {
        let bit: UInt8 = switch source {
        case .app: 1
        case .sdk: 2
        case .mediation: 4
        }
        bits |= bit
    }

    var count: Int { bits.nonzeroBitCount }
}

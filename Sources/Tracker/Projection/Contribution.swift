/// The projection tables the reports read.
public enum ProjectionTable: Int8, Sendable, Hashable, CaseIterable {
    /// Per day, ad unit and format: the `summary` and `adchoices` reports.
    case format
    /// Per day, ad unit, format and asset key: the `assets` report.
    case asset
    /// Per day, ad unit, format and adapter: the `sources` report (format only for filtering).
    case source
    /// Per day, ad unit, format and invalid-traffic label: the `ivt` report.
    case ivt
}

/// Which events a row was computed from, so that reports can leave test traffic out exactly.
///
/// An ad without test events contributes once (`plain`), valid for both kinds of report.
/// An ad with any test event contributes twice: over all its events (`withTest`) and over
/// its non-test events only (`withoutTest`). A report excluding test traffic sums `plain`
/// and `withoutTest`; one including it sums `plain` and `withTest`.
public enum TrafficClass: Int16, Sendable, Hashable, CaseIterable {
    case plain = 0
    case withTest = 1
    case withoutTest = 2

    public static func classes(includeTest: Bool) -> [TrafficClass] {
        includeTest ? [.plain, .withTest] : [.plain, .withoutTest]
    }
}

/// One row of a projection table: its dimensions.
///
/// Rows are kept per UTC quarter hour; the day tables receive the same rows summed by day
/// (`ProjectionWriter`), so a row's day is always its quarter hour's.
public struct ProjectionKey: Sendable, Hashable {
    public var table: ProjectionTable
    public var trafficClass: TrafficClass
    /// The UTC quarter hour the row counts in (`QuarterHour`).
    public var quarterHour: QuarterHour
    public var adUnit: String
    public var formatId: String
    /// The asset key for the asset table; "" otherwise.
    public var assetKey: String = ""
    /// The adapter ("" when absent) for the source table; "" otherwise.
    public var adapter: String = ""
    /// The invalid-traffic label for the ivt table; "" otherwise.
    public var label: String = ""
}

/// A row's measures; unused lanes stay zero. SIMD makes adding and subtracting rows cheap.
public typealias Measures = SIMD16<Int64>

/// What a set of ads adds to the projection tables: a sum of rows, signed.
public struct Contribution: Sendable, Equatable {
    public private(set) var rows: [ProjectionKey: Measures] = [:]

    public init() {}

    mutating func add<M: ProjectionMeasure>(_ key: ProjectionKey, _ measure: M, _ amount: Int64 = 1) {
        assert(key.table == M.table, "a \(M.table) measure on a \(key.table) row")
        rows[key, default: Measures()][measure.lane] &+= amount
    }

    public mutating func add(_ other: Contribution) {
        for (k, v) in other.rows { rows[k, default: Measures()] &+= v }
    }

    public mutating func subtract(_ other: Contribution) {
        for (k, v) in other.rows { rows[k, default: Measures()] &-= v }
    }

    /// Drops rows whose every measure is zero (a change that cancelled out).
    public mutating func removeZeros() {
        rows = rows.filter { $0.value != Measures() }
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

    /// Adds the contribution of one ad to `out`: the rebuild sums millions of ads this way
    /// without a dictionary per ad.
    public func accumulate(_ events: [AdEvent], into out: inout Contribution) {
        if events.contains(where: \.isTest) {
            add(events, as: .withTest, to: &out)
            let nonTest = events.filter { !$0.isTest }
            if !nonTest.isEmpty { add(nonTest, as: .withoutTest, to: &out) }
        } else {
            add(events, as: .plain, to: &out)
        }
    }

    private func add(_ events: [AdEvent], as cls: TrafficClass, to out: inout Contribution) {
        var rows = ContributionRows(trafficClass: cls)
        swap(&rows.out, &out)  // lend `out` to the sink without copying its dictionary
        fold(events, into: &rows)
        swap(&rows.out, &out)
    }

    /// The report rules (PROTOCOL.md 5) over the events of one ad (one traffic class): tells `verdicts` what each event
    /// became. The projections (`ContributionRows`) and the audit trail (`AdExplanation`) both
    /// consume this, so the rules exist once.
    func fold<Verdicts: AdVerdicts>(_ events: [AdEvent], into verdicts: inout Verdicts) {
        let sorted = events.count > 1 ? events.sorted(by: AdEvent.earlier) : events
        var countedImpression: AdEvent?
        var impressionSources = SourceSet()
        var firstLoaded: AdEvent?
        var firstAdchoicesImpression: AdEvent?
        var firstVideoPlay: AdEvent?
        var firstVideoEnd: AdEvent?
        var firstClick: AdEvent?
        var clickSources = SourceSet()
        var clicksByAsset: [String: [AdEvent]] = [:]

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
                clicksByAsset[e.assetKey ?? "", default: []].append(e)
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
            }
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

/// Why a counted click is not attributed to its ad's impression (PROTOCOL.md 5).
public enum UnattributedReason: String, Sendable, Hashable, CaseIterable {
    case noImpression = "no_impression"
    case beforeImpression = "before_impression"
    case outsideWindow = "outside_window"
}

/// Whether a counted click is attributed, and to which impression.
public enum ClickAttribution: Sendable, Hashable {
    case attributed(to: UUIDText)
    case unattributed(UnattributedReason)
}

/// The video measures an event can count its ad in (the ad's earliest such event).
public enum VideoMeasure: String, Sendable, Hashable {
    case videoPlays, videoEnds
}

/// What the report rules (PROTOCOL.md 5) made of each event of one ad, as `AdContribution.fold` finds it.
protocol AdVerdicts {
    mutating func countedImpression(_ e: AdEvent)
    mutating func duplicateImpression(_ e: AdEvent, of counted: AdEvent)
    /// After every event: what else the counted impression is.
    mutating func countedImpressionFacts(_ impression: AdEvent, stale: Bool, doubleTracked: Bool, withAdChoices: Bool)
    mutating func adLoaded(_ e: AdEvent, earliest: Bool)
    mutating func countedClick(_ c: AdEvent, _ attribution: ClickAttribution)
    mutating func duplicateClick(_ c: AdEvent, of counted: AdEvent)
    /// Clicks of the ad (duplicates included) came from more than one source.
    mutating func doubleTrackedClicks(firstClick: AdEvent)
    mutating func countedAdchoicesImpression(_ e: AdEvent)
    mutating func duplicateAdchoicesImpression(_ e: AdEvent, of counted: AdEvent)
    mutating func adchoicesClick(_ e: AdEvent)
    mutating func video(_ e: AdEvent, countedAs measure: VideoMeasure?)
    /// General invalid traffic: the event takes no part in the rules above.
    mutating func labelled(_ e: AdEvent, _ label: IVTLabel)
}

/// The verdicts of one ad as signed rows of the projection tables (PROTOCOL.md 6: where a row counts a thing).
struct ContributionRows: AdVerdicts {
    let trafficClass: TrafficClass
    var out = Contribution()

    init(trafficClass: TrafficClass) {
        self.trafficClass = trafficClass
    }

    private func formatKey(_ e: AdEvent) -> ProjectionKey {
        ProjectionKey(table: .format, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId)
    }

    private func assetKey(_ e: AdEvent) -> ProjectionKey {
        ProjectionKey(table: .asset, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId,
                      assetKey: e.assetKey ?? "")
    }

    private func ivtKey(_ e: AdEvent, _ label: IVTLabel) -> ProjectionKey {
        ProjectionKey(table: .ivt, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId,
                      label: label.rawValue)
    }

    private func sourceKey(_ e: AdEvent) -> ProjectionKey {
        ProjectionKey(table: .source, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId,
                      adapter: e.adapter ?? "")
    }

    private mutating func impressionBySource(_ e: AdEvent) {
        let bySource = switch e.source {
        case .app: SourceMeasure.appImpressions
        case .sdk: SourceMeasure.sdkImpressions
        case .mediation: SourceMeasure.mediationImpressions
        }
        out.add(sourceKey(e), bySource)
    }

    mutating func countedImpression(_ e: AdEvent) {
        out.add(formatKey(e), FormatMeasure.impressions)
        impressionBySource(e)
    }

    mutating func duplicateImpression(_ e: AdEvent, of counted: AdEvent) {
        out.add(formatKey(e), FormatMeasure.duplicateImpressions)
        impressionBySource(e)
    }

    mutating func countedImpressionFacts(_ impression: AdEvent, stale: Bool, doubleTracked: Bool, withAdChoices: Bool) {
        if stale { out.add(formatKey(impression), FormatMeasure.staleImpressions) }
        if doubleTracked { out.add(sourceKey(impression), SourceMeasure.doubleTrackedImpressionAds) }
        if impression.eea && impression.reservation {
            out.add(formatKey(impression), FormatMeasure.eeaReservationImpressions)
            if withAdChoices { out.add(formatKey(impression), FormatMeasure.withAdChoices) }
        }
    }

    mutating func adLoaded(_ e: AdEvent, earliest: Bool) {}

    mutating func countedClick(_ c: AdEvent, _ attribution: ClickAttribution) {
        out.add(formatKey(c), FormatMeasure.clicks)
        out.add(assetKey(c), AssetMeasure.clicks)
        switch attribution {
        case .attributed:
            out.add(formatKey(c), FormatMeasure.attributedClicks)
            out.add(assetKey(c), AssetMeasure.attributedClicks)
        case .unattributed(.noImpression): out.add(assetKey(c), AssetMeasure.noImpression)
        case .unattributed(.beforeImpression): out.add(assetKey(c), AssetMeasure.beforeImpression)
        case .unattributed(.outsideWindow): out.add(assetKey(c), AssetMeasure.outsideWindow)
        }
    }

    mutating func duplicateClick(_ c: AdEvent, of counted: AdEvent) {
        out.add(formatKey(c), FormatMeasure.duplicateClicks)
        out.add(assetKey(c), AssetMeasure.duplicateClicks)
    }

    mutating func doubleTrackedClicks(firstClick: AdEvent) {
        out.add(sourceKey(firstClick), SourceMeasure.doubleTrackedClickAds)
    }

    mutating func countedAdchoicesImpression(_ e: AdEvent) {
        out.add(formatKey(e), FormatMeasure.adchoicesImpressions)
    }

    mutating func duplicateAdchoicesImpression(_ e: AdEvent, of counted: AdEvent) {}

    mutating func adchoicesClick(_ e: AdEvent) {
        out.add(formatKey(e), FormatMeasure.adchoicesClicks)
    }

    mutating func video(_ e: AdEvent, countedAs measure: VideoMeasure?) {
        switch measure {
        case .videoPlays?: out.add(formatKey(e), FormatMeasure.videoPlays)
        case .videoEnds?: out.add(formatKey(e), FormatMeasure.videoEnds)
        case nil: break
        }
    }

    mutating func labelled(_ e: AdEvent, _ label: IVTLabel) {
        let key = ivtKey(e, label)
        out.add(key, IVTMeasure.events)
        switch e.type {
        case .impression:
            out.add(formatKey(e), FormatMeasure.givtImpressions)
            out.add(key, IVTMeasure.impressions)
        case .click:
            out.add(formatKey(e), FormatMeasure.givtClicks)
            out.add(key, IVTMeasure.clicks)
        default:
            break
        }
    }
}

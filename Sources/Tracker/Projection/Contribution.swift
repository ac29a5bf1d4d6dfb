/// The three projection tables the reports read.
public enum ProjectionTable: Int8, Sendable, Hashable, CaseIterable {
    /// Per day, ad unit and format: the `summary` and `adchoices` reports.
    case format
    /// Per day, ad unit, format and asset key: the `assets` report.
    case asset
    /// Per day, ad unit, format and adapter: the `sources` report (format only for filtering).
    case source
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
public struct ProjectionKey: Sendable, Hashable {
    public var table: ProjectionTable
    public var trafficClass: TrafficClass
    public var day: Day
    public var adUnit: String
    public var formatId: String
    /// The asset key for the asset table; "" otherwise.
    public var assetKey: String = ""
    /// The adapter ("" when absent) for the source table; "" otherwise.
    public var adapter: String = ""
}

/// Indices of the measures in a row's vector, per table.
public enum Measure {
    public enum Format {
        public static let impressions = 0, duplicateImpressions = 1, staleImpressions = 2, clicks = 3,
            duplicateClicks = 4, attributedClicks = 5, adchoicesImpressions = 6, adchoicesClicks = 7,
            videoPlays = 8, videoEnds = 9, eeaReservationImpressions = 10, withAdChoices = 11
        public static let count = 12
    }
    public enum Asset {
        public static let clicks = 0, duplicateClicks = 1, attributedClicks = 2, noImpression = 3,
            beforeImpression = 4, outsideWindow = 5
        public static let count = 6
    }
    public enum Source {
        public static let appImpressions = 0, sdkImpressions = 1, mediationImpressions = 2,
            doubleTrackedImpressionAds = 3, doubleTrackedClickAds = 4
        public static let count = 5
    }
}

/// A row's measures; unused lanes stay zero. SIMD makes adding and subtracting rows cheap.
public typealias Measures = SIMD16<Int64>

/// What a set of ads adds to the projection tables: a sum of rows, signed.
public struct Contribution: Sendable, Equatable {
    public private(set) var rows: [ProjectionKey: Measures] = [:]

    public init() {}

    mutating func add(_ key: ProjectionKey, _ index: Int, _ amount: Int64 = 1) {
        rows[key, default: Measures()][index] &+= amount
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

/// SPEC section 5 for one ad: the rows its events add to the projections.
///
/// A pure function of the ad's events, in any order, so projections built incrementally
/// (subtract the ad's old contribution, add its new one) equal projections rebuilt from
/// the log, and late events correct exactly the numbers they affect.
public struct AdContribution: Sendable {
    /// How long after its impression a click is still attributed (SPEC: default 1 hour).
    public var attributionWindow: Duration
    /// Clicks this close to the ad's impression but before it still count (SPEC: 1 s).
    public static let clockTolerance: Duration = .seconds(1)
    /// A second click of the same ad and asset within this time is a duplicate (SPEC: 1 s).
    public static let duplicateClickGap: Duration = .seconds(1)
    /// An impression this long after the ad loaded is stale (SPEC: 1 hour).
    public static let staleAfter: Duration = .seconds(3600)

    public init(attributionWindow: Duration = .seconds(3600)) {
        self.attributionWindow = attributionWindow
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
        let sorted = events.sorted(by: AdEvent.earlier)
        func formatKey(_ e: AdEvent) -> ProjectionKey {
            ProjectionKey(table: .format, trafficClass: cls, day: e.correctedAt.day, adUnit: e.adUnit, formatId: e.formatId)
        }
        func assetKey(_ e: AdEvent) -> ProjectionKey {
            ProjectionKey(table: .asset, trafficClass: cls, day: e.correctedAt.day, adUnit: e.adUnit, formatId: e.formatId, assetKey: e.assetKey ?? "")
        }
        func sourceKey(_ e: AdEvent) -> ProjectionKey {
            ProjectionKey(table: .source, trafficClass: cls, day: e.correctedAt.day, adUnit: e.adUnit, formatId: e.formatId, adapter: e.adapter ?? "")
        }

        var counted: AdEvent?
        var impressionSources = Set<EventSource>()
        var firstLoaded: AdEvent?
        var firstAdchoicesImpression: AdEvent?
        var firstVideoPlay: AdEvent?
        var firstVideoEnd: AdEvent?
        var firstClick: AdEvent?
        var clickSources = Set<EventSource>()
        var clicksByAsset: [String: [AdEvent]] = [:]

        for e in sorted {
            switch e.type {
            case .impression:
                if counted == nil {
                    counted = e
                    out.add(formatKey(e), Measure.Format.impressions)
                } else {
                    out.add(formatKey(e), Measure.Format.duplicateImpressions)
                }
                impressionSources.insert(e.source)
                let bySource = switch e.source {
                case .app: Measure.Source.appImpressions
                case .sdk: Measure.Source.sdkImpressions
                case .mediation: Measure.Source.mediationImpressions
                }
                out.add(sourceKey(e), bySource)
            case .adLoaded:
                if firstLoaded == nil { firstLoaded = e }
            case .click:
                if firstClick == nil { firstClick = e }
                clickSources.insert(e.source)
                clicksByAsset[e.assetKey ?? "", default: []].append(e)
            case .adchoicesImpression:
                if firstAdchoicesImpression == nil {
                    firstAdchoicesImpression = e
                    out.add(formatKey(e), Measure.Format.adchoicesImpressions)
                }
            case .adchoicesClick:
                out.add(formatKey(e), Measure.Format.adchoicesClicks)
            case .videoPlay:
                if firstVideoPlay == nil {
                    firstVideoPlay = e
                    out.add(formatKey(e), Measure.Format.videoPlays)
                }
            case .videoEnd:
                if firstVideoEnd == nil {
                    firstVideoEnd = e
                    out.add(formatKey(e), Measure.Format.videoEnds)
                }
            case .videoPause, .videoMute, .videoUnmute:
                break
            }
        }

        if let impression = counted {
            if let loaded = firstLoaded, impression.correctedAt - loaded.correctedAt > Self.staleAfter {
                out.add(formatKey(impression), Measure.Format.staleImpressions)
            }
            if impressionSources.count > 1 {
                out.add(sourceKey(impression), Measure.Source.doubleTrackedImpressionAds)
            }
            if impression.eea && impression.reservation {
                out.add(formatKey(impression), Measure.Format.eeaReservationImpressions)
                if firstAdchoicesImpression != nil {
                    out.add(formatKey(impression), Measure.Format.withAdChoices)
                }
            }
        }
        if let click = firstClick, clickSources.count > 1 {
            out.add(sourceKey(click), Measure.Source.doubleTrackedClickAds)
        }

        for (_, clicks) in clicksByAsset {
            var lastCounted: AdEvent?
            for c in clicks {  // already in SPEC order: sorted above
                if let last = lastCounted, c.correctedAt - last.correctedAt <= Self.duplicateClickGap {
                    out.add(formatKey(c), Measure.Format.duplicateClicks)
                    out.add(assetKey(c), Measure.Asset.duplicateClicks)
                    continue
                }
                lastCounted = c
                out.add(formatKey(c), Measure.Format.clicks)
                out.add(assetKey(c), Measure.Asset.clicks)
                guard let impression = counted else {
                    out.add(assetKey(c), Measure.Asset.noImpression)
                    continue
                }
                if c.correctedAt < impression.correctedAt - Self.clockTolerance {
                    out.add(assetKey(c), Measure.Asset.beforeImpression)
                } else if c.correctedAt > impression.correctedAt + attributionWindow {
                    out.add(assetKey(c), Measure.Asset.outsideWindow)
                } else {
                    out.add(formatKey(c), Measure.Format.attributedClicks)
                    out.add(assetKey(c), Measure.Asset.attributedClicks)
                }
            }
        }
    }
}

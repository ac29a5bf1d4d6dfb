/// The measures the projection tables keep: the one list from which the tables' measure
/// columns, the projector's writes and the reports' SQL and names are derived.
///
/// A case's position is its lane in a row's `Measures` vector, `column` is its column in the
/// day table and its place in the half-day rows' `counts`, and reports name it as the case is
/// named. Adding a measure takes a case here (at the end) with its column, its rule in
/// `AdContribution`, a migration that adds the day table's column and rewrites every half-day
/// row's `counts` to the new width (a 0 for the new measure after each count of the others) and
/// the column's comment, and the report columns that show it (`ReportSQL`);
/// `ProjectionSchemaTests` fails while this list and the schema disagree.
public protocol ProjectionMeasure: CaseIterable, Sendable, Hashable, RawRepresentable<Int> where AllCases == [Self] {
    static var table: ProjectionTable { get }
    var column: String { get }
}

extension ProjectionMeasure {
    /// The measure's lane in a row's `Measures` vector.
    var lane: Int { rawValue }
    /// The measure's name in reports (PROTOCOL.md section 6).
    public var name: String { String(describing: self) }
}

/// `format_day`: per day, ad unit and format.
public enum FormatMeasure: Int, ProjectionMeasure {
    case impressions, duplicateImpressions, staleImpressions, clicks, duplicateClicks, attributedClicks,
         adchoicesImpressions, adchoicesClicks, videoPlays, videoEnds, eeaReservationImpressions, withAdChoices,
         givtImpressions, givtClicks

    public static let table = ProjectionTable.format

    public var column: String {
        switch self {
        case .impressions: "impressions"
        case .duplicateImpressions: "duplicate_impressions"
        case .staleImpressions: "stale_impressions"
        case .clicks: "clicks"
        case .duplicateClicks: "duplicate_clicks"
        case .attributedClicks: "attributed_clicks"
        case .adchoicesImpressions: "adchoices_impressions"
        case .adchoicesClicks: "adchoices_clicks"
        case .videoPlays: "video_plays"
        case .videoEnds: "video_ends"
        case .eeaReservationImpressions: "eea_reservation_impressions"
        case .withAdChoices: "with_adchoices"
        case .givtImpressions: "givt_impressions"
        case .givtClicks: "givt_clicks"
        }
    }
}

/// `asset_day`: per day, ad unit, format and asset key.
public enum AssetMeasure: Int, ProjectionMeasure {
    case clicks, duplicateClicks, attributedClicks, noImpression, beforeImpression, outsideWindow

    public static let table = ProjectionTable.asset

    public var column: String {
        switch self {
        case .clicks: "clicks"
        case .duplicateClicks: "duplicate_clicks"
        case .attributedClicks: "attributed_clicks"
        case .noImpression: "no_impression"
        case .beforeImpression: "before_impression"
        case .outsideWindow: "outside_window"
        }
    }
}

/// `source_day`: per day, ad unit, format and adapter.
public enum SourceMeasure: Int, ProjectionMeasure {
    case appImpressions, sdkImpressions, mediationImpressions, doubleTrackedImpressionAds, doubleTrackedClickAds

    public static let table = ProjectionTable.source

    public var column: String {
        switch self {
        case .appImpressions: "app_impressions"
        case .sdkImpressions: "sdk_impressions"
        case .mediationImpressions: "mediation_impressions"
        case .doubleTrackedImpressionAds: "double_tracked_impression_ads"
        case .doubleTrackedClickAds: "double_tracked_click_ads"
        }
    }
}

/// `ivt_day`: labelled events per day, ad unit, format and label (the `ivt` report).
public enum IVTMeasure: Int, ProjectionMeasure {
    case impressions, clicks, events

    public static let table = ProjectionTable.ivt

    public var column: String {
        switch self {
        case .impressions: "impressions"
        case .clicks: "clicks"
        case .events: "events"
        }
    }
}

/// `funnel_day`: per day, ad unit and format (the format a load asked for, `""` when none; a
/// loaded ad's own): the `funnel` report (PROTOCOL.md 10). The loaded ads' load latencies are
/// counted per bucket of `LatencyBuckets`, one measure each, from which the report reads its
/// percentiles.
public enum FunnelMeasure: Int, ProjectionMeasure {
    case requests, adsRequested, filledRequests, failedRequests, unansweredRequests, loadedAds, shownAds
    case latency10, latency20, latency30, latency50, latency75, latency100, latency150, latency200, latency300, latency400, latency500, latency750, latency1000, latency1500, latency2000, latency3000, latency4000, latency5000, latency7500, latency10000, latency15000, latency20000, latency30000, latency60000, latency600000

    public static let table = ProjectionTable.funnel

    /// The measure that counts latencies in `bucket` (an index into `LatencyBuckets.bounds`).
    static func latency(bucket: Int) -> FunnelMeasure { FunnelMeasure(rawValue: latency10.rawValue + bucket)! }
    static let latencies = Array(allCases[latency10.rawValue...])

    public var column: String {
        switch self {
        case .requests: "requests"
        case .adsRequested: "ads_requested"
        case .filledRequests: "filled_requests"
        case .failedRequests: "failed_requests"
        case .unansweredRequests: "unanswered_requests"
        case .loadedAds: "loaded_ads"
        case .shownAds: "shown_ads"
        default: "load_latency_" + String(LatencyBuckets.bounds[rawValue - Self.latency10.rawValue])
        }
    }
}

/// `failure_day`: failed loads per day, ad unit, format and error code (the `failures` report).
public enum FailureMeasure: Int, ProjectionMeasure {
    case failedRequests

    public static let table = ProjectionTable.failure

    public var column: String { "failed_requests" }
}

/// `waterfall_day`: mediation attempts per day, ad unit, format, adapter and position (the
/// `waterfall` report), with their latencies per bucket of `LatencyBuckets`.
public enum WaterfallMeasure: Int, ProjectionMeasure {
    case attempts, loaded, failed, timeouts
    case latency10, latency20, latency30, latency50, latency75, latency100, latency150, latency200, latency300, latency400, latency500, latency750, latency1000, latency1500, latency2000, latency3000, latency4000, latency5000, latency7500, latency10000, latency15000, latency20000, latency30000, latency60000, latency600000

    public static let table = ProjectionTable.waterfall

    /// The measure that counts latencies in `bucket` (an index into `LatencyBuckets.bounds`).
    static func latency(bucket: Int) -> WaterfallMeasure { WaterfallMeasure(rawValue: latency10.rawValue + bucket)! }
    static let latencies = Array(allCases[latency10.rawValue...])

    public var column: String {
        switch self {
        case .attempts: "attempts"
        case .loaded: "loaded"
        case .failed: "failed"
        case .timeouts: "timeouts"
        default: "latency_" + String(LatencyBuckets.bounds[rawValue - Self.latency10.rawValue])
        }
    }
}

extension ProjectionTable {
    /// The table's measure columns, in lane order.
    public var measureColumns: [String] {
        switch self {
        case .format: FormatMeasure.allCases.map(\.column)
        case .asset: AssetMeasure.allCases.map(\.column)
        case .source: SourceMeasure.allCases.map(\.column)
        case .ivt: IVTMeasure.allCases.map(\.column)
        case .funnel: FunnelMeasure.allCases.map(\.column)
        case .failure: FailureMeasure.allCases.map(\.column)
        case .waterfall: WaterfallMeasure.allCases.map(\.column)
        }
    }
}

extension Measures {
    /// The value of `measure` in a row's vector.
    public subscript<M: ProjectionMeasure>(_ measure: M) -> Int64 {
        get { self[measure.lane] }
        set { self[measure.lane] = newValue }
    }
}

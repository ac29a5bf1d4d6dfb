/// Why a counted click is not attributed to its ad's impression (PROTOCOL.md 5).
public enum UnattributedReason: String, Sendable, Hashable, CaseIterable {
    case noImpression = "no_impression"
    case beforeImpression = "before_impression"
    case outsideWindow = "outside_window"
}

/// Whether a counted click is attributed, and to which impression.
public enum ClickAttribution: Sendable, Hashable {
    case attributed(to: PackedUUID)
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
    /// After every event: the ad's earliest `ad_loaded`, which makes it a loaded ad
    /// (PROTOCOL.md 10), `shown` when it has a counted impression.
    mutating func loadedAd(_ loaded: AdEvent, shown: Bool)
    /// General invalid traffic: the event takes no part in the rules above.
    mutating func labelled(_ e: AdEvent, _ label: IVTLabel)
}

/// What the funnel's rules (PROTOCOL.md 10) made of each event of one load, as
/// `AdContribution.foldLoad` finds it.
protocol LoadVerdicts {
    /// After every event: the load's earliest `ad_request`, which makes it requested, and its outcome.
    mutating func requested(_ request: AdEvent, outcome: LoadOutcome)
    /// A further `ad_request` of the load: not a request again.
    mutating func repeatedRequest(_ e: AdEvent, of counted: AdEvent)
    /// After every event: an `ad_failed`; `counted` when its error is the failed load's (the
    /// earliest failure of a requested load that is not filled).
    mutating func failure(_ e: AdEvent, counted: Bool)
    /// A load reference: an `ad_loaded` that names the load, which fills it.
    mutating func fill(_ reference: AdEvent)
    /// A mediation attempt's earliest `mediation_result`, which counts it.
    mutating func attempt(_ e: AdEvent)
    /// A further `mediation_result` of the same adapter and position.
    mutating func repeatedAttempt(_ e: AdEvent, of counted: AdEvent)
    /// General invalid traffic: the event takes no part in the rules above.
    mutating func labelled(_ e: AdEvent, _ label: IVTLabel)
}

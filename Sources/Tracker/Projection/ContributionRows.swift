/// The verdicts of one ad or load as signed rows of the projection tables (PROTOCOL.md 6 and 10:
/// where a row counts a thing).
struct ContributionRows: AdVerdicts, LoadVerdicts {
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

    private func funnelKey(_ e: AdEvent) -> ProjectionKey {
        ProjectionKey(table: .funnel, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId)
    }

    private func failureKey(_ e: AdEvent, _ code: AdErrorCode) -> ProjectionKey {
        ProjectionKey(table: .failure, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId,
                      errorCode: code.rawValue)
    }

    private func waterfallKey(_ e: AdEvent) -> ProjectionKey {
        ProjectionKey(table: .waterfall, trafficClass: trafficClass, quarterHour: QuarterHour(e.correctedAt), adUnit: e.adUnit, formatId: e.formatId,
                      adapter: e.adapter ?? "", position: Int32(e.position ?? 0))
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

    mutating func loadedAd(_ loaded: AdEvent, shown: Bool) {
        let key = funnelKey(loaded)
        out.add(key, FunnelMeasure.loadedAds)
        if shown { out.add(key, FunnelMeasure.shownAds) }
        if let latency = loaded.latencyMs { out.add(key, FunnelMeasure.latency(bucket: LatencyBuckets.bucket(of: latency))) }
    }

    mutating func requested(_ request: AdEvent, outcome: LoadOutcome) {
        let key = funnelKey(request)
        out.add(key, FunnelMeasure.requests)
        out.add(key, FunnelMeasure.adsRequested, Int64(request.adsRequested ?? 1))
        switch outcome {
        case .filled: out.add(key, FunnelMeasure.filledRequests)
        case .failed(let code):
            out.add(key, FunnelMeasure.failedRequests)
            out.add(failureKey(request, code), FailureMeasure.failedRequests)
        case .unanswered: out.add(key, FunnelMeasure.unansweredRequests)
        }
    }

    mutating func repeatedRequest(_ e: AdEvent, of counted: AdEvent) {}

    mutating func failure(_ e: AdEvent, counted: Bool) {}

    mutating func fill(_ reference: AdEvent) {}

    mutating func attempt(_ e: AdEvent) {
        let key = waterfallKey(e)
        out.add(key, WaterfallMeasure.attempts)
        switch e.result {
        case .loaded?: out.add(key, WaterfallMeasure.loaded)
        case .failed?: out.add(key, WaterfallMeasure.failed)
        case .timeout?: out.add(key, WaterfallMeasure.timeouts)
        case nil: break
        }
        if let latency = e.latencyMs { out.add(key, WaterfallMeasure.latency(bucket: LatencyBuckets.bucket(of: latency))) }
    }

    mutating func repeatedAttempt(_ e: AdEvent, of counted: AdEvent) {}

    mutating func labelled(_ e: AdEvent, _ label: IVTLabel) {
        // A load reference is its ad_loaded again, which its ad's rows count.
        guard !e.isLoadReference else { return }
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

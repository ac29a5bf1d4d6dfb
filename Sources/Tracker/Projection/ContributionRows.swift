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
        let eeaReservation = impression.eea && impression.reservation
        if stale || eeaReservation {
            out.update(formatKey(impression), FormatMeasure.self) { row in
                if stale { row.count(.staleImpressions) }
                if eeaReservation {
                    row.count(.eeaReservationImpressions)
                    if withAdChoices { row.count(.withAdChoices) }
                }
            }
        }
        if doubleTracked { out.add(sourceKey(impression), SourceMeasure.doubleTrackedImpressionAds) }
    }

    mutating func adLoaded(_ e: AdEvent, earliest: Bool) {}

    mutating func countedClick(_ c: AdEvent, _ attribution: ClickAttribution) {
        let asset: AssetMeasure = switch attribution {
        case .attributed: .attributedClicks
        case .unattributed(.noImpression): .noImpression
        case .unattributed(.beforeImpression): .beforeImpression
        case .unattributed(.outsideWindow): .outsideWindow
        }
        out.update(formatKey(c), FormatMeasure.self) { row in
            row.count(.clicks)
            if case .attributed = attribution { row.count(.attributedClicks) }
        }
        out.update(assetKey(c), AssetMeasure.self) { row in
            row.count(.clicks)
            row.count(asset)
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
        out.update(funnelKey(loaded), FunnelMeasure.self) { row in
            row.count(.loadedAds)
            if shown { row.count(.shownAds) }
            if let latency = loaded.latencyMs { row.count(.latency(bucket: LatencyBuckets.bucket(of: latency))) }
        }
    }

    mutating func requested(_ request: AdEvent, outcome: LoadOutcome) {
        out.update(funnelKey(request), FunnelMeasure.self) { row in
            row.count(.requests)
            row.count(.adsRequested, Int64(request.adsRequested ?? 1))
            switch outcome {
            case .filled: row.count(.filledRequests)
            case .failed: row.count(.failedRequests)
            case .unanswered: row.count(.unansweredRequests)
            }
        }
        if case .failed(let code) = outcome { out.add(failureKey(request, code), FailureMeasure.failedRequests) }
    }

    mutating func repeatedRequest(_ e: AdEvent, of counted: AdEvent) {}

    mutating func failure(_ e: AdEvent, counted: Bool) {}

    mutating func fill(_ reference: AdEvent) {}

    mutating func attempt(_ e: AdEvent) {
        out.update(waterfallKey(e), WaterfallMeasure.self) { row in
            row.count(.attempts)
            switch e.result {
            case .loaded?: row.count(.loaded)
            case .failed?: row.count(.failed)
            case .timeout?: row.count(.timeouts)
            case nil: break
            }
            if let latency = e.latencyMs { row.count(.latency(bucket: LatencyBuckets.bucket(of: latency))) }
        }
    }

    mutating func repeatedAttempt(_ e: AdEvent, of counted: AdEvent) {}

    mutating func labelled(_ e: AdEvent, _ label: IVTLabel) {
        // A load reference is its ad_loaded again, which its ad's rows count.
        guard !e.isLoadReference else { return }
        out.update(ivtKey(e, label), IVTMeasure.self) { row in
            row.count(.events)
            switch e.type {
            case .impression: row.count(.impressions)
            case .click: row.count(.clicks)
            default: break
            }
        }
        switch e.type {
        case .impression: out.add(formatKey(e), FormatMeasure.givtImpressions)
        case .click: out.add(formatKey(e), FormatMeasure.givtClicks)
        default: break
        }
    }
}

/// What one stored event became under the report rules (docs/PROTOCOL.md, section 5).
public enum EventOutcome: Sendable, Hashable {
    /// `earliest`: the ad's earliest `ad_loaded`, from which staleness is measured.
    case adLoaded(earliest: Bool)
    /// The ad's one counted impression; `stale` when it came more than 1 h after the earliest load.
    case countedImpression(stale: Bool)
    case duplicateImpression(of: PackedUUID)
    case countedClick(ClickAttribution)
    /// Within 1 s after the counted click `of`, of the same asset key.
    case duplicateClick(of: PackedUUID)
    case countedAdchoicesImpression
    case duplicateAdchoicesImpression(of: PackedUUID)
    case adchoicesClick
    /// A video event; `countedAs` the measure it counts the ad in, if any.
    case video(countedAs: VideoMeasure?)
    /// A test event left out because test traffic was not asked for.
    case testTraffic
    /// General invalid traffic: the event took no part in the rules.
    case invalidTraffic(IVTLabel)
}

/// One stored event of an ad and its outcome.
public struct ExplainedEvent: Sendable, Hashable {
    public var event: AdEvent
    /// The event's own `test` flag as sent (`event.isTest` also covers the test ad units).
    public var testFlag: Bool
    /// The device's and the server's times, `nil` when retention dropped the event's day from
    /// the log (the projections keep what they need of it, so it still counts).
    public var occurredAt: Timestamp?
    public var sentAt: Timestamp?
    public var receivedAt: Timestamp?
    public var outcome: EventOutcome
    /// The rule behind its invalid-traffic label (`nil` when it has none, or it is not known:
    /// an event dropped from the log has no client left to judge).
    public var labelledBy: LabellingRule? = nil

    /// A few words for the command line: the outcome's, with the rule behind a label.
    public var summary: String {
        guard case .invalidTraffic(let label) = outcome, let labelledBy else { return outcome.summary }
        return "invalid traffic (\(label.rawValue), \(labelledBy.summary)), left out of every measure"
    }
}

/// An ad's audit trail: every stored event in PROTOCOL.md 5 order with what it became.
public struct AdExplanation: Sendable, Hashable {
    public var requestId: String
    public var includeTest: Bool
    public var attributionWindow: Duration
    /// The invalid-traffic rule set whose labels the events carry (the projections').
    public var ivtRules: Int = 0
    public var countedImpression: PackedUUID?
    public var doubleTrackedImpressions: Bool
    public var doubleTrackedClicks: Bool
    public var events: [ExplainedEvent]
}

/// An event as the log stores it, with the times the audit shows.
public struct LoggedEvent: Sendable, Hashable {
    public var event: AdEvent
    public var testFlag: Bool
    public var occurredAt: Timestamp?
    public var sentAt: Timestamp?
    public var receivedAt: Timestamp?

    public init(event: AdEvent, testFlag: Bool, occurredAt: Timestamp?, sentAt: Timestamp?, receivedAt: Timestamp?) {
        self.event = event
        self.testFlag = testFlag
        self.occurredAt = occurredAt
        self.sentAt = sentAt
        self.receivedAt = receivedAt
    }
}

extension AdContribution {
    /// The audit trail of one ad from its events, by the same fold the projections use.
    ///
    /// Like the reports, test events take part only with `includeTest`; without it they are
    /// listed as `testTraffic` and the ad's other events are judged among themselves.
    public func explain(requestId: String, _ logged: [LoggedEvent], includeTest: Bool) -> AdExplanation {
        var verdicts = ExplanationVerdicts()
        let judged = includeTest ? logged.map(\.event) : logged.map(\.event).filter { !$0.isTest }
        fold(judged, into: &verdicts)
        let events = logged.sorted { AdEvent.earlier($0.event, $1.event) }.map { l in
            ExplainedEvent(event: l.event, testFlag: l.testFlag, occurredAt: l.occurredAt, sentAt: l.sentAt,
                           receivedAt: l.receivedAt,
                           outcome: !includeTest && l.event.isTest ? .testTraffic : verdicts.outcomes[l.event.id] ?? .testTraffic)
        }
        return AdExplanation(requestId: requestId, includeTest: includeTest, attributionWindow: attributionWindow,
                             countedImpression: verdicts.countedImpression, doubleTrackedImpressions: verdicts.doubleTrackedImpressions,
                             doubleTrackedClicks: verdicts.doubleTrackedClicks, events: events)
    }
}

/// The verdicts of one ad, per event id.
struct ExplanationVerdicts: AdVerdicts {
    var outcomes: [PackedUUID: EventOutcome] = [:]
    var countedImpression: PackedUUID?
    var doubleTrackedImpressions = false
    var doubleTrackedClicks = false

    mutating func countedImpression(_ e: AdEvent) {
        countedImpression = e.id
        outcomes[e.id] = .countedImpression(stale: false)
    }

    mutating func duplicateImpression(_ e: AdEvent, of counted: AdEvent) {
        outcomes[e.id] = .duplicateImpression(of: counted.id)
    }

    mutating func countedImpressionFacts(_ impression: AdEvent, stale: Bool, doubleTracked: Bool, withAdChoices: Bool) {
        outcomes[impression.id] = .countedImpression(stale: stale)
        doubleTrackedImpressions = doubleTracked
    }

    mutating func adLoaded(_ e: AdEvent, earliest: Bool) {
        outcomes[e.id] = .adLoaded(earliest: earliest)
    }

    mutating func countedClick(_ c: AdEvent, _ attribution: ClickAttribution) {
        outcomes[c.id] = .countedClick(attribution)
    }

    mutating func duplicateClick(_ c: AdEvent, of counted: AdEvent) {
        outcomes[c.id] = .duplicateClick(of: counted.id)
    }

    mutating func doubleTrackedClicks(firstClick: AdEvent) {
        doubleTrackedClicks = true
    }

    mutating func countedAdchoicesImpression(_ e: AdEvent) {
        outcomes[e.id] = .countedAdchoicesImpression
    }

    mutating func duplicateAdchoicesImpression(_ e: AdEvent, of counted: AdEvent) {
        outcomes[e.id] = .duplicateAdchoicesImpression(of: counted.id)
    }

    mutating func adchoicesClick(_ e: AdEvent) {
        outcomes[e.id] = .adchoicesClick
    }

    mutating func video(_ e: AdEvent, countedAs measure: VideoMeasure?) {
        outcomes[e.id] = .video(countedAs: measure)
    }

    mutating func labelled(_ e: AdEvent, _ label: IVTLabel) {
        outcomes[e.id] = .invalidTraffic(label)
    }
}

extension AdExplanation {
    /// The JSON body of `GET /v1/ads/{requestId}` (docs/openapi.yaml, `AdExplanation`).
    public var json: String {
        var out = "{\"requestId\":"
        JSONText.appendQuoted(requestId, to: &out)
        out += ",\"includeTest\":\(includeTest),\"attributionWindowSeconds\":\(attributionWindow.components.seconds),\"ivtRules\":\(ivtRules)"
        out += ",\"countedImpression\":" + (countedImpression.map { "\"\($0.text)\"" } ?? "null")
        out += ",\"doubleTrackedImpressions\":\(doubleTrackedImpressions),\"doubleTrackedClicks\":\(doubleTrackedClicks),\"events\":["
        for (i, x) in events.enumerated() {
            if i > 0 { out += "," }
            let e = x.event
            out += "{\"id\":\"\(e.id.text)\",\"type\":\"\(e.type.rawValue)\",\"source\":\"\(e.source.rawValue)\",\"adapter\":"
            Self.appendOptional(e.adapter, to: &out)
            out += ",\"assetKey\":"
            Self.appendOptional(e.assetKey, to: &out)
            out += ",\"adUnit\":"
            JSONText.appendQuoted(e.adUnit, to: &out)
            out += ",\"formatId\":"
            JSONText.appendQuoted(e.formatId, to: &out)
            out += ",\"eea\":\(e.eea),\"reservation\":\(e.reservation),\"test\":\(x.testFlag)"
            out += ",\"occurredAt\":"
            Self.appendOptional(x.occurredAt?.rfc3339, to: &out)
            out += ",\"sentAt\":"
            Self.appendOptional(x.sentAt?.rfc3339, to: &out)
            out += ",\"receivedAt\":"
            Self.appendOptional(x.receivedAt?.rfc3339, to: &out)
            out += ",\"correctedAt\":\"\(e.correctedAt.rfc3339)\",\"day\":\"\(e.correctedAt.day)\",\"label\":"
            Self.appendOptional(x.outcome.label?.rawValue, to: &out)
            out += ",\"labelledBy\":" + (x.labelledBy?.json ?? "null")
            out += ",\"outcome\":"
            out += x.outcome.json
            out += "}"
        }
        out += "]}"
        return out
    }

    private static func appendOptional(_ value: String?, to out: inout String) {
        if let value { JSONText.appendQuoted(value, to: &out) } else { out += "null" }
    }
}

extension EventOutcome {
    /// The outcome's kind as the API names it.
    public var kind: String {
        switch self {
        case .adLoaded: "ad_loaded"
        case .countedImpression: "counted_impression"
        case .duplicateImpression: "duplicate_impression"
        case .countedClick: "counted_click"
        case .duplicateClick: "duplicate_click"
        case .countedAdchoicesImpression: "counted_adchoices_impression"
        case .duplicateAdchoicesImpression: "duplicate_adchoices_impression"
        case .adchoicesClick: "adchoices_click"
        case .video: "video"
        case .testTraffic: "test_traffic"
        case .invalidTraffic: "invalid_traffic"
        }
    }

    /// The event's invalid-traffic label, when that is what it became.
    public var label: IVTLabel? {
        if case .invalidTraffic(let label) = self { label } else { nil }
    }

    /// `{"kind": …}` with the members of that kind (docs/openapi.yaml, `Outcome`).
    var json: String {
        let head = "{\"kind\":\"\(kind)\""
        switch self {
        case .adLoaded(let earliest): return head + ",\"earliest\":\(earliest)}"
        case .countedImpression(let stale): return head + ",\"stale\":\(stale)}"
        case .duplicateImpression(let of), .duplicateClick(let of), .duplicateAdchoicesImpression(let of):
            return head + ",\"duplicateOf\":\"\(of.text)\"}"
        case .countedClick(.attributed(to: let impression)): return head + ",\"attributedTo\":\"\(impression.text)\"}"
        case .countedClick(.unattributed(let reason)): return head + ",\"unattributedReason\":\"\(reason.rawValue)\"}"
        case .video(let measure): return head + ",\"countedAs\":" + (measure.map { "\"\($0.rawValue)\"" } ?? "null") + "}"
        case .invalidTraffic(let label): return head + ",\"label\":\"\(label.rawValue)\"}"
        case .countedAdchoicesImpression, .adchoicesClick, .testTraffic: return head + "}"
        }
    }

    /// A few words for the command line's table.
    public var summary: String {
        switch self {
        case .adLoaded(let earliest): earliest ? "ad loaded (earliest: staleness is measured from it)" : "ad loaded"
        case .countedImpression(let stale): stale ? "counted impression, stale (over 1 h after the load)" : "counted impression"
        case .duplicateImpression(let of): "duplicate impression of \(of.text)"
        case .countedClick(.attributed(to: let impression)): "counted click, attributed to \(impression.text)"
        case .countedClick(.unattributed(let reason)): "counted click, unattributed: \(reason.rawValue)"
        case .duplicateClick(let of): "duplicate click of \(of.text)"
        case .countedAdchoicesImpression: "counted AdChoices impression"
        case .duplicateAdchoicesImpression(let of): "duplicate AdChoices impression of \(of.text)"
        case .adchoicesClick: "AdChoices click"
        case .video(let measure?): "video, counted in \(measure.rawValue)"
        case .video(nil): "video, not counted (the ad's earlier event counts)"
        case .testTraffic: "test traffic, left out (include test traffic to judge it)"
        case .invalidTraffic(let label): "invalid traffic (\(label.rawValue)), left out of every measure"
        }
    }
}

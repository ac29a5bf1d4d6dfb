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
    /// A load's earliest `ad_request`, which makes it requested, and what became of the load.
    case loadRequest(LoadOutcome)
    /// A further `ad_request` of a load already requested by `of`.
    case repeatedRequest(of: PackedUUID)
    /// An `ad_failed`; `counted` when its error is the failed load's.
    case loadFailure(counted: Bool)
    /// An `ad_loaded` that names the load: it fills the load.
    case loadFill
    /// A mediation attempt's earliest `mediation_result`, which counts it.
    case mediationAttempt
    /// A further `mediation_result` of the attempt counted by `of`.
    case repeatedAttempt(of: PackedUUID)
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
    /// The ad it belongs to, and the load it belongs to or names (`LoggedEvent`).
    public var requestId: String?
    public var loadId: String?
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

/// A load's audit trail (PROTOCOL.md 10): its events and the `ad_loaded` events that name it, in
/// the rules' order, with what each became.
public struct LoadExplanation: Sendable, Hashable {
    public var loadId: String
    public var includeTest: Bool
    /// The invalid-traffic rule set whose labels the events carry (the projections').
    public var ivtRules: Int = 0
    /// What became of the load; `nil` when it has no (valid) `ad_request`, so it is not requested.
    public var outcome: LoadOutcome?
    public var events: [ExplainedEvent]
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
    /// The trails of the loads its `ad_loaded` events name.
    public var loads: [LoadExplanation] = []
}

/// An event as the log stores it, with the times the audit shows.
public struct LoggedEvent: Sendable, Hashable {
    public var event: AdEvent
    public var testFlag: Bool
    public var occurredAt: Timestamp?
    public var sentAt: Timestamp?
    public var receivedAt: Timestamp?
    /// The ad it belongs to (`nil` for a load's own events, and where retention dropped it from the log).
    public var requestId: String?
    /// The load it belongs to or names.
    public var loadId: String?

    public init(event: AdEvent, testFlag: Bool, occurredAt: Timestamp?, sentAt: Timestamp?, receivedAt: Timestamp?,
                requestId: String? = nil, loadId: String? = nil) {
        self.event = event
        self.testFlag = testFlag
        self.occurredAt = occurredAt
        self.sentAt = sentAt
        self.receivedAt = receivedAt
        self.requestId = requestId
        self.loadId = loadId
    }
}

extension AdContribution {
    /// The audit trail of one ad from its events, by the same fold the projections use.
    ///
    /// Like the reports, test events take part only with `includeTest`; without it they are
    /// listed as `testTraffic` and the ad's other events are judged among themselves.
    public func explain(requestId: String, _ logged: [LoggedEvent], includeTest: Bool) -> AdExplanation {
        var verdicts = ExplanationVerdicts()
        fold(Self.judged(logged, includeTest: includeTest), into: &verdicts)
        return AdExplanation(requestId: requestId, includeTest: includeTest, attributionWindow: attributionWindow,
                             countedImpression: verdicts.countedImpression, doubleTrackedImpressions: verdicts.doubleTrackedImpressions,
                             doubleTrackedClicks: verdicts.doubleTrackedClicks,
                             events: Self.explained(logged, by: verdicts, includeTest: includeTest))
    }

    /// The audit trail of one load (its events and load references) by the fold the projections use.
    public func explain(loadId: String, _ logged: [LoggedEvent], includeTest: Bool) -> LoadExplanation {
        var verdicts = ExplanationVerdicts()
        foldLoad(Self.judged(logged, includeTest: includeTest), into: &verdicts)
        return LoadExplanation(loadId: loadId, includeTest: includeTest, outcome: verdicts.loadOutcome,
                               events: Self.explained(logged, by: verdicts, includeTest: includeTest))
    }

    /// The events the rules judge: without `includeTest`, the non-test ones.
    private static func judged(_ logged: [LoggedEvent], includeTest: Bool) -> [AdEvent] {
        includeTest ? logged.map(\.event) : logged.map(\.event).filter { !$0.isTest }
    }

    private static func explained(_ logged: [LoggedEvent], by verdicts: ExplanationVerdicts, includeTest: Bool) -> [ExplainedEvent] {
        logged.sorted { AdEvent.earlier($0.event, $1.event) }.map { l in
            ExplainedEvent(event: l.event, testFlag: l.testFlag, occurredAt: l.occurredAt, sentAt: l.sentAt,
                           receivedAt: l.receivedAt, requestId: l.requestId, loadId: l.loadId,
                           outcome: !includeTest && l.event.isTest ? .testTraffic : verdicts.outcomes[l.event.id] ?? .testTraffic)
        }
    }
}

/// The verdicts of one ad or load, per event id.
struct ExplanationVerdicts: AdVerdicts, LoadVerdicts {
    var outcomes: [PackedUUID: EventOutcome] = [:]
    var countedImpression: PackedUUID?
    var doubleTrackedImpressions = false
    var doubleTrackedClicks = false
    var loadOutcome: LoadOutcome?

    mutating func loadedAd(_ loaded: AdEvent, shown: Bool) {}

    mutating func requested(_ request: AdEvent, outcome: LoadOutcome) {
        loadOutcome = outcome
        outcomes[request.id] = .loadRequest(outcome)
    }

    mutating func repeatedRequest(_ e: AdEvent, of counted: AdEvent) {
        outcomes[e.id] = .repeatedRequest(of: counted.id)
    }

    mutating func failure(_ e: AdEvent, counted: Bool) {
        outcomes[e.id] = .loadFailure(counted: counted)
    }

    mutating func fill(_ reference: AdEvent) {
        outcomes[reference.id] = .loadFill
    }

    mutating func attempt(_ e: AdEvent) {
        outcomes[e.id] = .mediationAttempt
    }

    mutating func repeatedAttempt(_ e: AdEvent, of counted: AdEvent) {
        outcomes[e.id] = .repeatedAttempt(of: counted.id)
    }

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
        out += ",\"doubleTrackedImpressions\":\(doubleTrackedImpressions),\"doubleTrackedClicks\":\(doubleTrackedClicks),\"events\":"
        Self.appendEvents(events, to: &out)
        out += ",\"loads\":["
        for (i, load) in loads.enumerated() {
            if i > 0 { out += "," }
            out += load.json
        }
        out += "]}"
        return out
    }

    /// The `events` array of an ad's or a load's trail.
    static func appendEvents(_ events: [ExplainedEvent], to out: inout String) {
        out += "["
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
            out += ",\"correctedAt\":\"\(e.correctedAt.rfc3339)\",\"day\":\"\(e.correctedAt.day)\""
            out += ",\"requestId\":"
            Self.appendOptional(x.requestId, to: &out)
            out += ",\"loadId\":"
            Self.appendOptional(x.loadId, to: &out)
            out += ",\"adsRequested\":" + (e.adsRequested.map(String.init) ?? "null")
            out += ",\"latencyMs\":" + (e.latencyMs.map(String.init) ?? "null")
            out += ",\"errorCode\":" + (e.errorCode.map { "\"\($0.rawValue)\"" } ?? "null")
            out += ",\"result\":" + (e.result.map { "\"\($0.rawValue)\"" } ?? "null")
            out += ",\"position\":" + (e.position.map(String.init) ?? "null")
            out += ",\"label\":"
            Self.appendOptional(x.outcome.label?.rawValue, to: &out)
            out += ",\"labelledBy\":" + (x.labelledBy?.json ?? "null")
            out += ",\"outcome\":"
            out += x.outcome.json
            out += "}"
        }
        out += "]"
    }

    static func appendOptional(_ value: String?, to out: inout String) {
        if let value { JSONText.appendQuoted(value, to: &out) } else { out += "null" }
    }
}

extension LoadExplanation {
    /// The JSON body of `GET /v1/loads/{loadId}` (docs/openapi.yaml, `LoadExplanation`).
    public var json: String {
        var out = "{\"loadId\":"
        JSONText.appendQuoted(loadId, to: &out)
        out += ",\"includeTest\":\(includeTest),\"ivtRules\":\(ivtRules),\"requested\":\(outcome != nil)"
        out += ",\"outcome\":" + (outcome.map { "\"\($0.name)\"" } ?? "null")
        var error: String?
        if case .failed(let code)? = outcome { error = code.rawValue }
        out += ",\"errorCode\":" + (error.map { "\"\($0)\"" } ?? "null") + ",\"events\":"
        AdExplanation.appendEvents(events, to: &out)
        out += "}"
        return out
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
        case .loadRequest: "load_request"
        case .repeatedRequest: "repeated_request"
        case .loadFailure: "load_failure"
        case .loadFill: "load_fill"
        case .mediationAttempt: "mediation_attempt"
        case .repeatedAttempt: "repeated_attempt"
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
        case .duplicateImpression(let of), .duplicateClick(let of), .duplicateAdchoicesImpression(let of), .repeatedRequest(let of),
             .repeatedAttempt(let of):
            return head + ",\"duplicateOf\":\"\(of.text)\"}"
        case .loadRequest(let outcome):
            var error = "null"
            if case .failed(let code) = outcome { error = "\"\(code.rawValue)\"" }
            return head + ",\"loadOutcome\":\"\(outcome.name)\",\"errorCode\":\(error)}"
        case .loadFailure(let counted): return head + ",\"counted\":\(counted)}"
        case .loadFill, .mediationAttempt: return head + "}"
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
        case .loadRequest(.filled): "load requested, filled"
        case .loadRequest(.failed(let code)): "load requested, failed: \(code.rawValue)"
        case .loadRequest(.unanswered): "load requested, unanswered"
        case .repeatedRequest(let of): "repeated request of \(of.text), not a request again"
        case .loadFailure(let counted): counted ? "load failure, counted (the load's error)" : "load failure, not counted (the load was filled or failed earlier)"
        case .loadFill: "ad loaded: fills the load"
        case .mediationAttempt: "mediation attempt, counted"
        case .repeatedAttempt(let of): "repeated mediation result of \(of.text), not counted again"
        }
    }
}

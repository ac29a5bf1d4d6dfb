import Foundation

/// One load: a `loadRequest:` call on a `GADAdLoader`, from its `ad_request` to its outcome (the
/// protocol's section 10, the ad funnel). `AdTracker.loadStarted` records the request and starts
/// timing the load on the device's monotonic clock; the calls below record what the load then
/// gets, each with the milliseconds since (`latencyMs`).
///
public struct TrackedLoad: Sendable {
    let tracker: AdTracker
    /// The load's id: every event of the load, and the `ad_loaded` of each ad it gets, carry it.
    public let loadId: String
    /// The ad unit path the ads are requested for.
    public let adUnit: String
    /// The format asked for, when the app asked for one.
    public let format: NativeAdFormat?
    /// Whether it is a test request.
    public let test: Bool
    /// Attributes every event of this load carries.
    public let attributes: [String: AttributeValue]
    /// When the load started, on the monotonic clock.
    let started: Duration
    /// The id of the load's `ad_request` event.
    public let requestEventID: UUID

    /// The fields every event of this load carries.
    func fields(source: EventSource) -> EventFields {
        Self.fields(loadId: loadId, adUnit: adUnit, format: format, source: source, test: test)
    }

    static func fields(loadId: String, adUnit: String, format: NativeAdFormat?, source: EventSource, test: Bool) -> EventFields {
        EventFields(loadId: loadId, adUnit: adUnit, format: format, source: source, test: test)
    }

    /// An ad the load received (`adLoader(_:didReceive:)`; with several ads per request, once per
    /// ad): records its `ad_loaded`, which names this load and carries the load's latency, and
    /// returns the ad for its later events. The parameters are `AdTracker.adLoaded`'s.
    public func adLoaded(requestId: String, format: NativeAdFormat, eea: Bool = false, reservation: Bool = false,
                         source: EventSource = .app, adapter: String? = nil, attributes: [String: AttributeValue] = [:]) -> TrackedAd {
        var ad = tracker.ad(requestId: requestId, adUnit: adUnit, format: format, eea: eea, reservation: reservation, test: test,
                            source: source, adapter: adapter, attributes: self.attributes.merging(attributes) { $1 })
        var fields = ad.fields
        fields.loadId = loadId
        fields.latencyMs = tracker.milliseconds(since: started)
        ad.loadEventID = tracker.record(.adLoaded, fields: fields, attributes: ad.attributes)
        return ad
    }

    /// The load failed (`adLoader(_:didFailToReceiveAdWithError:)`): records `ad_failed` with the
    /// SDK's error (`AdErrorCode(gadErrorCode: error.code)`) and the load's latency.
    @discardableResult
    public func failed(_ error: AdErrorCode, attributes: [String: AttributeValue] = [:]) -> UUID {
        var fields = fields(source: .app)
        fields.errorCode = error
        fields.latencyMs = tracker.milliseconds(since: started)
        return tracker.record(.adFailed, fields: fields, attributes: self.attributes.merging(attributes) { $1 })
    }

    /// The waterfall asks one network (a mediation custom event's `loadNativeAd(for:completionHandler:)`
    /// was called): starts timing that network's answer.
    ///
    /// - Parameters:
    ///   - adapter: the network's or adapter's name.
    ///   - position: its place in the waterfall, 1 to 100.
    public func mediationStarted(adapter: String, position: Int) -> MediationAttempt {
        MediationAttempt(load: self, adapter: adapter, position: position, started: tracker.clock.monotonic())
    }
}

/// One network of a load's mediation waterfall, from the call that asks it to its answer.
public struct MediationAttempt: Sendable {
    let load: TrackedLoad
    /// The network's or adapter's name.
    public let adapter: String
    /// Its place in the waterfall.
    public let position: Int
    let started: Duration

    /// The network answered with an ad (the completion handler called with an ad).
    @discardableResult
    public func loaded(attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.loaded, error: nil, attributes: attributes)
    }

    /// The network answered with an error (the completion handler called with an error).
    @discardableResult
    public func failed(_ error: AdErrorCode, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.failed, error: error, attributes: attributes)
    }

    /// The waterfall gave up waiting for the network.
    @discardableResult
    public func timedOut(attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.timeout, error: nil, attributes: attributes)
    }

    private func record(_ result: MediationResult, error: AdErrorCode?, attributes: [String: AttributeValue]) -> UUID {
        var fields = load.fields(source: .mediation)
        fields.adapter = adapter
        fields.position = position
        fields.result = result
        fields.errorCode = error
        fields.latencyMs = load.tracker.milliseconds(since: started)
        return load.tracker.record(.mediationResult, fields: fields, attributes: load.attributes.merging(attributes) { $1 })
    }
}

extension AdErrorCode {
    /// The case of a `GADErrorCode` value (`GADRequestError`'s `code`); `.other` for a code
    /// this version does not name.
    public init(gadErrorCode code: Int) {
        self = switch code {
        case 0: .invalidRequest
        case 1: .noFill
        case 2: .networkError
        case 3: .serverError
        case 4: .osVersionTooLow
        case 5: .timeout
        case 7: .mediationDataError
        case 8: .mediationAdapterError
        case 9: .mediationNoFill
        case 10: .mediationInvalidAdSize
        case 11: .internalError
        case 12: .invalidArgument
        case 13: .receivedInvalidResponse
        case 19: .adAlreadyUsed
        case 20: .applicationIdentifierMissing
        default: .other
        }
    }
}

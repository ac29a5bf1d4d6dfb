import Foundation

/// One loaded native ad (one `requestId`) and the calls that record its events, named after
/// the ads SDK calls they accompany.
///
/// Every call is recorded and sent as made: the tracker counts a second `recordImpression()`
/// of the same ad as a duplicate impression (a signal worth seeing), so the client never hides
/// it. Each call returns the new event's id (UUIDv7).
public struct TrackedAd: Sendable {
    let tracker: AdTracker
    public let requestId: String
    public let adUnit: String
    public let format: NativeAdFormat
    public let eea: Bool
    public let reservation: Bool
    public let test: Bool
    /// Who detects this ad's events unless a call names another source.
    public let source: EventSource
    public let adapter: String?
    public let attributes: [String: AttributeValue]
    /// The id of this ad's `ad_loaded` event, when `AdTracker.adLoaded` recorded it.
    public internal(set) var loadEventID: UUID?

    init(tracker: AdTracker, requestId: String, adUnit: String, format: NativeAdFormat, eea: Bool, reservation: Bool,
         test: Bool, source: EventSource, adapter: String?, attributes: [String: AttributeValue]) {
        self.tracker = tracker
        self.requestId = requestId
        self.adUnit = adUnit
        self.format = format
        self.eea = eea
        self.reservation = reservation
        self.test = test
        self.source = source
        self.adapter = adapter
        self.attributes = attributes
    }

    /// An impression: next to `customNativeAd.recordImpression()`, or in the SDK's or a
    /// mediation adapter's impression callback (with that `source`).
    @discardableResult
    public func recordImpression(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.impression, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// A click on the asset `assetKey` (the key passed to `performClickOnAsset(withKey:)`,
    /// e.g. `MainImage`), and how it was handled when known.
    @discardableResult
    public func recordClick(onAsset assetKey: String, action: ClickAction? = nil, source: EventSource? = nil,
                            attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.click, source: source, assetKey: assetKey, clickAction: action, attributes: attributes)
    }

    /// The AdChoices ("About this ad") icon was rendered for this ad.
    @discardableResult
    public func recordAdChoicesImpression(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.adchoicesImpression, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// The AdChoices icon was tapped (the app's `performClickOnAsset` with the AdChoices key).
    /// Never counted as a click on the ad.
    @discardableResult
    public func recordAdChoicesClick(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.adchoicesClick, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// A video controller event of an ad with video content.
    @discardableResult
    public func recordVideo(_ event: VideoEvent, source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(event.eventType, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    @discardableResult
    func record(_ type: EventType, source: EventSource?, assetKey: String?, clickAction: ClickAction?,
                attributes: [String: AttributeValue]) -> UUID {
        tracker.record(type, of: self, source: source, assetKey: assetKey, clickAction: clickAction, attributes: attributes)
    }
}

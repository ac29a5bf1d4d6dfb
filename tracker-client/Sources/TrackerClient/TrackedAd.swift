import Foundation

/// One loaded native ad (one `requestId`) and the calls that record its events, named after
/// the ads SDK calls they accompany.
///
/// Every call is recorded and sent as made: the tracker counts a second `recordImpression()`
/// of the same ad as a duplicate impression (a signal worth seeing), so the client never hides
/// it. Each call returns the new event's id (UUIDv7).
public struct TrackedAd: Sendable {
    let tracker: AdTracker
    /// The ad's request id, the key every event of this ad carries and reports count by.
    public let requestId: String
    /// The ad unit path the ad was requested for, e.g. `/1234/feed/native`.
    public let adUnit: String
    /// The custom native format (its id) the ad was rendered with.
    public let format: NativeAdFormat
    /// Whether the user is in the EEA (consent rules applied to the request).
    public let eea: Bool
    /// Whether the ad came from a reservation (direct) line item rather than the auction.
    public let reservation: Bool
    /// Whether it is a test ad: reports leave test events out unless asked for them.
    public let test: Bool
    /// Who detects this ad's events unless a call names another source.
    public let source: EventSource
    /// The mediation adapter that served the ad, if one did.
    public let adapter: String?
    /// Attributes every event of this ad carries (a call's own attributes add to them).
    public let attributes: [String: AttributeValue]
    /// The id of this ad's `ad_loaded` event, when `AdTracker.adLoaded` or `TrackedLoad.adLoaded` recorded it.
    public internal(set) var loadEventID: UUID?

    /// The fields every event of this ad carries.
    var fields: EventFields {
        EventFields(requestId: requestId, adUnit: adUnit, format: format, source: source, adapter: adapter, eea: eea,
                    reservation: reservation, test: test)
    }

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
    ///
    /// - Parameters:
    ///   - source: who detected it, when not the ad's own `source`.
    ///   - attributes: this event's attributes, added to the ad's.
    /// - Returns: the event's id, the same on every delivery attempt.
    @discardableResult
    public func recordImpression(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.impression, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// A click on the asset `assetKey` (the key passed to `performClickOnAsset(withKey:)`,
    /// e.g. `MainImage`), and how it was handled when known.
    ///
    /// - Parameters:
    ///   - assetKey: the clicked asset's key; clicks are attributed per asset key.
    ///   - action: how the click was handled (a custom handler, a deep link, the destination URL), when known.
    ///   - source: who detected it, when not the ad's own `source`.
    ///   - attributes: this event's attributes, added to the ad's.
    /// - Returns: the event's id, the same on every delivery attempt.
    @discardableResult
    public func recordClick(onAsset assetKey: String, action: ClickAction? = nil, source: EventSource? = nil,
                            attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.click, source: source, assetKey: assetKey, clickAction: action, attributes: attributes)
    }

    /// The AdChoices ("About this ad") icon was rendered for this ad.
    ///
    /// - Parameters:
    ///   - source: who detected it, when not the ad's own `source`.
    ///   - attributes: this event's attributes, added to the ad's.
    /// - Returns: the event's id, the same on every delivery attempt.
    @discardableResult
    public func recordAdChoicesImpression(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.adchoicesImpression, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// The AdChoices icon was tapped (the app's `performClickOnAsset` with the AdChoices key).
    /// Never counted as a click on the ad.
    ///
    /// - Parameters:
    ///   - source: who detected it, when not the ad's own `source`.
    ///   - attributes: this event's attributes, added to the ad's.
    /// - Returns: the event's id, the same on every delivery attempt.
    @discardableResult
    public func recordAdChoicesClick(source: EventSource? = nil, attributes: [String: AttributeValue] = [:]) -> UUID {
        record(.adchoicesClick, source: source, assetKey: nil, clickAction: nil, attributes: attributes)
    }

    /// A video controller event of an ad with video content.
    ///
    /// - Parameters:
    ///   - event: what the video controller reported (play, pause, end, mute, unmute).
    ///   - source: who detected it, when not the ad's own `source`.
    ///   - attributes: this event's attributes, added to the ad's.
    /// - Returns: the event's id, the same on every delivery attempt.
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

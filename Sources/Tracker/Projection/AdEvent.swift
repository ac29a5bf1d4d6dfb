/// The part of a logged event that reports depend on, as the projections keep it per ad or per
/// load (PROTOCOL.md 10).
///
/// A load's state holds its own events (`ad_request`, `ad_failed`, `mediation_result`) and, as
/// *load references*, a copy of every `ad_loaded` that names it by `loadId`: what makes the load
/// filled, while the `ad_loaded` itself counts for its ad.
public struct AdEvent: Sendable, Hashable {
    public var id: PackedUUID
    public var type: EventType
    public var correctedAt: Timestamp
    public var adUnit: String
    public var formatId: String
    public var assetKey: String?
    public var source: EventSource
    public var adapter: String?
    public var eea: Bool
    public var reservation: Bool
    /// Test traffic: `test: true` or one of the SDK's test ad units (PROTOCOL.md section 5).
    public var isTest: Bool
    /// The invalid-traffic label the event's client earned under the projections' rule set
    /// (`declaredBot`, `datacenter` or `highRate`), or `nil`. `excessiveClicks` is never
    /// stored: it follows from the ad's other clicks (`AdContribution`).
    public var label: IVTLabel?
    /// A copy of an `ad_loaded` kept in the state of the load it names (`loadId`).
    public var isLoadReference = false
    /// The funnel's fields (PROTOCOL.md 10), on the types they belong to.
    public var errorCode: AdErrorCode?
    public var result: MediationResult?
    /// `adsRequested`, within `FunnelLimits.adsRequested`.
    public var adsRequested: Int? {
        get { storedAdsRequested.map(Int.init) }
        set { storedAdsRequested = newValue.map { UInt8(clamping: $0) } }
    }
    /// `latencyMs`, within `FunnelLimits.latencyMs`.
    public var latencyMs: Int? {
        get { storedLatencyMs.map(Int.init) }
        set { storedLatencyMs = newValue.map { Int32(clamping: $0) } }
    }
    /// `position`, within `FunnelLimits.position`.
    public var position: Int? {
        get { storedPosition.map(Int.init) }
        set { storedPosition = newValue.map { UInt8(clamping: $0) } }
    }
    // The funnel's numbers are stored in the smallest types their ranges fit (the stored state's
    // record keeps them in as few bytes): a step copies and sorts its events many times, and
    // three `Int?` would make every event larger, the ads' too, which have none of them.
    private var storedAdsRequested: UInt8?
    private var storedLatencyMs: Int32?
    private var storedPosition: UInt8?

    /// Whether the event counts for a load (its own event or a load reference) rather than for an ad.
    public var isLoadPart: Bool { isLoadReference || type.isLoadEvent }

    public init(id: PackedUUID, type: EventType, correctedAt: Timestamp, adUnit: String, formatId: String,
                assetKey: String? = nil, source: EventSource = .app, adapter: String? = nil,
                eea: Bool = false, reservation: Bool = false, test: Bool = false) {
        self.id = id
        self.type = type
        self.correctedAt = correctedAt
        self.adUnit = adUnit
        self.formatId = formatId
        self.assetKey = assetKey
        self.source = source
        self.adapter = adapter
        self.eea = eea
        self.reservation = reservation
        self.isTest = test || AdEvent.testAdUnits.contains(adUnit)
    }

    /// An event read back from the projector's own storage, whose `isTest` was computed when
    /// it was first projected (no second look-up of the test ad units).
    init(id: PackedUUID, type: EventType, correctedAt: Timestamp, adUnit: String, formatId: String, assetKey: String?,
         source: EventSource, adapter: String?, eea: Bool, reservation: Bool, isTest: Bool, label: IVTLabel? = nil) {
        self.id = id
        self.type = type
        self.correctedAt = correctedAt
        self.adUnit = adUnit
        self.formatId = formatId
        self.assetKey = assetKey
        self.source = source
        self.adapter = adapter
        self.eea = eea
        self.reservation = reservation
        self.isTest = isTest
        self.label = label
    }

    public init(_ event: TrackingEvent) {
        self.init(id: event.id, type: event.type, correctedAt: event.correctedAt, adUnit: event.adUnit,
                  formatId: event.formatId, assetKey: event.assetKey, source: event.source, adapter: event.adapter,
                  eea: event.eea, reservation: event.reservation, test: event.test)
        adsRequested = event.adsRequested
        latencyMs = event.latencyMs
        errorCode = event.errorCode
        result = event.result
        position = event.position
    }

    /// The copy of this `ad_loaded` that its load's state keeps.
    var loadReference: AdEvent {
        var reference = self
        reference.isLoadReference = true
        return reference
    }

    /// The SDK's sample ad units, which serve only test ads.
    public static let testAdUnits: Set<String> = [
        "/6499/example/native", "/6499/example/native-backfill",
        "/21775744923/example/native", "/21775744923/example/native-backfill",
    ]


    /// The protocol's order for "earliest": corrected time, then the smaller id as a string
    /// (and an event before its own load reference, when an ad and a load share a key).
    static func earlier(_ a: AdEvent, _ b: AdEvent) -> Bool {
        if a.correctedAt != b.correctedAt { return a.correctedAt < b.correctedAt }
        if a.id != b.id { return a.id < b.id }
        return !a.isLoadReference && b.isLoadReference
    }
}

extension Array where Element == AdEvent {
    /// The events in the rules' order (`AdEvent.earlier`), as a stable sort gives them. A state's
    /// events are stored in that order and a step's mostly come after them, so a look spares the
    /// sort and its copy almost every time.
    var inRulesOrder: [AdEvent] {
        for i in indices.dropFirst() where AdEvent.earlier(self[i], self[i - 1]) { return sorted(by: AdEvent.earlier) }
        return self
    }
}

/// Why an event is general invalid traffic (docs/REPORTS.md, "Invalid traffic"): at most one
/// label per event, the first that applies in this order.
public enum IVTLabel: String, Sendable, Hashable, CaseIterable {
    /// Its user agent matches a pattern of the rule set.
    case declaredBot = "declared_bot"
    /// Its IP address is inside a range of the rule set.
    case datacenter
    /// More than `maxEventsPerClientMinute` stored events share its IP, user agent and UTC
    /// minute of receipt.
    case highRate = "high_rate"
    /// A counted click of its ad beyond the first `maxClicksPerAd`.
    case excessiveClicks = "excessive_clicks"

    /// The labels an event's client earns, which the projections store per event.
    static let stored: [IVTLabel] = [.declaredBot, .datacenter, .highRate]
}

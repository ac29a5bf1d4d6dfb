/// An event that passed every rule of PROTOCOL.md section 1 and has its corrected time.
///
/// Only the validator creates these (the initializer is not public and the fields cannot
/// change), so code downstream never re-checks fields.
public struct TrackingEvent: Sendable, Hashable {
    /// The idempotency key, lower-case canonical UUID text.
    public let id: PackedUUID
    public let type: EventType
    /// The ad: one loaded ad object; `nil` for the events of a load (`ad_request`, `ad_failed`,
    /// `mediation_result`), which have no ad yet.
    public let requestId: String?
    public let adUnit: String
    /// The custom native format or system format; `""` when a load's event names none.
    public let formatId: String
    public let assetKey: String?
    public let clickAction: ClickAction?
    public let source: EventSource
    public let adapter: String?
    public let eea: Bool
    public let reservation: Bool
    public let test: Bool
    /// Attribute pairs in the order they arrived.
    public let attributes: [(key: String, value: AttributeValue)]
    public let occurredAt: Timestamp
    public let sentAt: Timestamp?
    public let receivedAt: Timestamp
    /// The time every report uses (PROTOCOL.md section 3).
    public let correctedAt: Timestamp
    /// The `loadRequest:` call the event belongs to: set on a load's events, and on an
    /// `ad_loaded` that links its ad to its load.
    public let loadId: String?
    /// `ad_request`: how many ads the load asked for (`GADMultipleAdsAdLoaderOptions`).
    public let adsRequested: Int?
    /// `ad_loaded`, `ad_failed`, `mediation_result`: milliseconds from the load call to the
    /// answer, on the device's monotonic clock.
    public let latencyMs: Int?
    /// `ad_failed`, `mediation_result`: the SDK's error.
    public let errorCode: AdErrorCode?
    /// `mediation_result`: how the network answered.
    public let result: MediationResult?
    /// `mediation_result`: the network's place in the waterfall.
    public let position: Int?
    /// The device's user agent as the event gave it (server keys only); the request's
    /// `User-Agent` is filled in by the ingest route when this is `nil`.
    public internal(set) var userAgent: String?
    /// The device's IP address as the event gave it (server keys only); otherwise the
    /// request's client, filled in by the ingest route.
    public internal(set) var clientIP: IPAddress?

    /// For the validator (`EventRules`) and the package's own test fixtures only.
    package init(
        id: PackedUUID, type: EventType, requestId: String?, adUnit: String, formatId: String,
        assetKey: String? = nil, clickAction: ClickAction? = nil, source: EventSource = .app,
        adapter: String? = nil, eea: Bool = false, reservation: Bool = false, test: Bool = false,
        attributes: [(key: String, value: AttributeValue)] = [],
        occurredAt: Timestamp, sentAt: Timestamp? = nil, receivedAt: Timestamp, correctedAt: Timestamp,
        loadId: String? = nil, adsRequested: Int? = nil, latencyMs: Int? = nil, errorCode: AdErrorCode? = nil,
        result: MediationResult? = nil, position: Int? = nil,
        userAgent: String? = nil, clientIP: IPAddress? = nil
    ) {
        self.id = id
        self.type = type
        self.requestId = requestId
        self.adUnit = adUnit
        self.formatId = formatId
        self.assetKey = assetKey
        self.clickAction = clickAction
        self.source = source
        self.adapter = adapter
        self.eea = eea
        self.reservation = reservation
        self.test = test
        self.attributes = attributes
        self.occurredAt = occurredAt
        self.sentAt = sentAt
        self.receivedAt = receivedAt
        self.correctedAt = correctedAt
        self.loadId = loadId
        self.adsRequested = adsRequested
        self.latencyMs = latencyMs
        self.errorCode = errorCode
        self.result = result
        self.position = position
        self.userAgent = userAgent
        self.clientIP = clientIP
    }

    /// The key the log stores the event under (its `request_id` column): the ad's request id,
    /// or for a load's events the load's id. Load ids and request ids may coincide: the
    /// projections tell an ad's events from a load's by their type, never by this key.
    public var logKey: String { requestId ?? loadId ?? "" }

    /// The event as the log records it, sent by `client`: its own `userAgent` and `ip` (a
    /// server key's) win over the request's.
    ///
    /// - Parameters:
    ///   - client: the request's user agent and address.
    ///   - truncatingAddresses: store the /24 (IPv4) or /48 (IPv6) instead of the address
    ///     (`TRACKER_IP_STORAGE=truncated`), the event's own `ip` too.
    public func sent(by client: EventClient, truncatingAddresses: Bool = false) -> TrackingEvent {
        var event = self
        if event.userAgent == nil { event.userAgent = client.userAgent }
        if event.clientIP == nil { event.clientIP = client.ip }
        if truncatingAddresses { event.clientIP = event.clientIP?.truncated() }
        return event
    }

    public static func == (lhs: TrackingEvent, rhs: TrackingEvent) -> Bool {
        lhs.id == rhs.id && lhs.type == rhs.type && lhs.requestId == rhs.requestId
            && lhs.adUnit == rhs.adUnit && lhs.formatId == rhs.formatId && lhs.assetKey == rhs.assetKey
            && lhs.clickAction == rhs.clickAction && lhs.source == rhs.source && lhs.adapter == rhs.adapter
            && lhs.eea == rhs.eea && lhs.reservation == rhs.reservation && lhs.test == rhs.test
            && lhs.attributes.elementsEqual(rhs.attributes, by: { $0.key == $1.key && $0.value == $1.value })
            && lhs.occurredAt == rhs.occurredAt && lhs.sentAt == rhs.sentAt
            && lhs.receivedAt == rhs.receivedAt && lhs.correctedAt == rhs.correctedAt
            && lhs.loadId == rhs.loadId && lhs.adsRequested == rhs.adsRequested && lhs.latencyMs == rhs.latencyMs
            && lhs.errorCode == rhs.errorCode && lhs.result == rhs.result && lhs.position == rhs.position
            && lhs.userAgent == rhs.userAgent && lhs.clientIP == rhs.clientIP
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
    }
}

/// Who sent a request, as the log records it for every event of it (invalid-traffic rules).
public struct EventClient: Sendable, Hashable {
    /// The `User-Agent` header, `""` when absent, at most `EventClient.maxUserAgentCharacters`.
    public var userAgent: String
    /// The peer, or the client a trusted proxy forwarded for; `nil` when unknown.
    public var ip: IPAddress?

    /// User agents are kept up to this many characters (the `userAgent` field's limit).
    public static let maxUserAgentCharacters = 512

    public init(userAgent: String, ip: IPAddress?) {
        let scalars = userAgent.unicodeScalars
        self.userAgent = scalars.count > Self.maxUserAgentCharacters
            ? String(String.UnicodeScalarView(scalars.prefix(Self.maxUserAgentCharacters))) : userAgent
        self.ip = ip
    }
}

/// A UUID, shown in canonical lower-case text form (8-4-4-4-12 hex digits).
///
/// Kept as its 16 bytes, in two big-endian halves: equality, hashing and the protocol's tie-break
/// ("the smaller event id as a string") need no string, and no id costs an allocation. For
/// canonical lower-case text, string order is byte order (the hex digits sort as their values,
/// the dashes stand at the same places), so `<` compares the halves.
public struct PackedUUID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Bytes 0 to 7 and 8 to 15, big-endian.
    public let high: UInt64
    public let low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Accepts any UUID version, upper or lower case hex.
    public init?(_ raw: some StringProtocol) {
        var high: UInt64 = 0, low: UInt64 = 0
        var position = 0, digits = 0
        for b in raw.utf8 {
            guard position < 36 else { return nil }
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard b == UInt8(ascii: "-") else { return nil }
            } else {
                guard let v = Hex.value(b) else { return nil }
                if digits < 16 { high = high << 4 | UInt64(v) } else { low = low << 4 | UInt64(v) }
                digits += 1
            }
            position += 1
        }
        guard position == 36 else { return nil }
        self.init(high: high, low: low)
    }

    /// The canonical lower-case text.
    public var text: String {
        String(unsafeUninitializedCapacity: 36) { out in
            var o = 0
            for i in 0..<16 {
                if i == 4 || i == 6 || i == 8 || i == 10 { out[o] = UInt8(ascii: "-"); o += 1 }
                let byte = self.byte(i)
                out[o] = Hex.digit(byte >> 4)
                out[o + 1] = Hex.digit(byte & 0x0f)
                o += 2
            }
            return 36
        }
    }

    /// Byte `i` (0 to 15).
    @inline(__always)
    public func byte(_ i: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: (i < 8 ? high : low) >> UInt64(8 * (7 - (i & 7))))
    }

    public static func < (lhs: PackedUUID, rhs: PackedUUID) -> Bool {
        lhs.high != rhs.high ? lhs.high < rhs.high : lhs.low < rhs.low
    }

    public var description: String { text }
}

extension TrackingEvent {
    /// The attributes as the log stores them (`jsonb`), `nil` when there are none.
    public var attributesJSON: String? {
        AttributeValue.json(attributes)
    }
}

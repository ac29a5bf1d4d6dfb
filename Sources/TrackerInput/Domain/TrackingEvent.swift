/// An event that passed every rule of SPEC section 1 and has its corrected time.
///
/// Only the validator creates these (the initializer is not public and the fields cannot
/// change), so code downstream never re-checks fields.
public struct TrackingEvent: Sendable, Hashable {
    /// The idempotency key, lower-case canonical UUID text.
    public let id: UUIDText
    public let type: EventType
    /// The ad: one loaded ad object.
    public let requestId: String
    public let adUnit: String
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
    /// The time every report uses (SPEC section 3).
    public let correctedAt: Timestamp

    /// For the validator (`EventRules`) and the package's own test fixtures only.
    package init(
        id: UUIDText, type: EventType, requestId: String, adUnit: String, formatId: String,
        assetKey: String? = nil, clickAction: ClickAction? = nil, source: EventSource = .app,
        adapter: String? = nil, eea: Bool = false, reservation: Bool = false, test: Bool = false,
        attributes: [(key: String, value: AttributeValue)] = [],
        occurredAt: Timestamp, sentAt: Timestamp? = nil, receivedAt: Timestamp, correctedAt: Timestamp
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
    }

    public static func == (lhs: TrackingEvent, rhs: TrackingEvent) -> Bool {
        lhs.id == rhs.id && lhs.type == rhs.type && lhs.requestId == rhs.requestId
            && lhs.adUnit == rhs.adUnit && lhs.formatId == rhs.formatId && lhs.assetKey == rhs.assetKey
            && lhs.clickAction == rhs.clickAction && lhs.source == rhs.source && lhs.adapter == rhs.adapter
            && lhs.eea == rhs.eea && lhs.reservation == rhs.reservation && lhs.test == rhs.test
            && lhs.attributes.elementsEqual(rhs.attributes, by: { $0.key == $1.key && $0.value == $1.value })
            && lhs.occurredAt == rhs.occurredAt && lhs.sentAt == rhs.sentAt
            && lhs.receivedAt == rhs.receivedAt && lhs.correctedAt == rhs.correctedAt
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
    }
}

/// A UUID in canonical lower-case text form (8-4-4-4-12 hex digits).
///
/// Kept as text because that is how it travels (JSON, COPY, reports) and how the
/// SPEC breaks ties between events ("the smaller event id as a string").
public struct UUIDText: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let text: String

    /// Text already known to be a canonical lower-case UUID (e.g. written from 16 bytes).
    package init(checked text: String) {
        self.text = text
    }

    /// Accepts any UUID version, upper or lower case hex; stores it lower-cased.
    public init?(_ raw: some StringProtocol) {
        let bytes = Array(raw.utf8)
        guard bytes.count == 36 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(36)
        for (i, b) in bytes.enumerated() {
            if i == 8 || i == 13 || i == 18 || i == 23 {
                guard b == UInt8(ascii: "-") else { return nil }
                out.append(b)
            } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(b) {
                out.append(b)
            } else if (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(b) {
                out.append(b + 32)
            } else {
                return nil
            }
        }
        self.text = String(decoding: out, as: UTF8.self)
    }

    public static func < (lhs: UUIDText, rhs: UUIDText) -> Bool {
        lhs.text < rhs.text
    }

    public var description: String { text }
}

extension TrackingEvent {
    /// The attributes as the log stores them (`jsonb`), `nil` when there are none.
    public var attributesJSON: String? {
        AttributeValue.json(attributes)
    }
}

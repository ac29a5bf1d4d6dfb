/// The field rules of PROTOCOL.md section 1 for one event, and the time correction of section 3.
///
/// Every message names the field and the rule, and shows what was sent, so the app
/// developer who reads a rejection knows what to fix without opening the spec.
package struct EventRules {
    var limits: IngestLimits
    var receivedAt: Timestamp
    var sentAt: Timestamp?
    /// Whether the key may set `userAgent` and `ip` (a server key): they say which device an
    /// event came from, which only a server sending on the devices' behalf can know.
    var serverKey: Bool
    /// The networks the key may send events for (PROTOCOL.md 11); `nil`: every network.
    var networks: NetworkScope?

    package init(limits: IngestLimits, receivedAt: Timestamp, sentAt: Timestamp?, serverKey: Bool = false, networks: NetworkScope? = nil) {
        self.limits = limits
        self.receivedAt = receivedAt
        self.sentAt = sentAt
        self.serverKey = serverKey
        self.networks = networks
    }

    /// Devices may be ahead of the server by up to this much when they send no `sentAt`.
    static let maxAheadWithoutSentAt: Duration = .seconds(24 * 3600)
    /// An event may be stamped at most this long after its batch's `sentAt`.
    static let maxAheadOfSentAt: Duration = .seconds(1)
    /// No report day can be earlier than this; older corrected times are refused.
    static let earliestCorrectedTime = Timestamp(microseconds: 0)

    /// A valid event, or every rule it breaks.
    package func validate(_ value: JSONValue) -> Result<TrackingEvent, Violations> {
        guard case .object = value else {
            return .failure(Violations(["the event must be a JSON object, got \(value.typeName)"]))
        }
        var v = Violations()
        let id = v.required(value, "id", hint: "a UUID such as 0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11") { text in
            PackedUUID(text).map(Check.ok) ?? .broken("must be a UUID (8-4-4-4-12 hex digits)")
        }
        let type = v.required(value, "type", hint: "one of \(Self.list(EventType.self))") { text in
            EventType(rawValue: text).map(Check.ok) ?? .broken("must be one of \(Self.list(EventType.self))")
        }
        // A load's events (PROTOCOL.md 10) have no ad yet: they are named by loadId, and the
        // format is the one asked for, when there was one.
        let isLoad = type?.isLoadEvent ?? false
        var requestId: String?
        if let type, isLoad {
            if v.isPresent(value, "requestId") {
                v.add(about: "requestId", "requestId must be absent for \(type.rawValue): a load has no ad yet (it is named by loadId)")
            }
        } else {
            requestId = v.required(value, "requestId", hint: "the ad response's id, 1 to 128 characters") { text in
                Self.checkIdentifier(text, maxCharacters: 128)
            }
        }
        let adUnit = v.required(value, "adUnit", hint: "an ad unit path such as /6499/example/native") { text in
            Self.checkAdUnit(text)
        }
        if let adUnit, let networks, !networks.contains(adUnit: adUnit) {
            v.add(about: "adUnit", "adUnit \(Violations.excerpt(adUnit)) belongs to network \(NetworkScope.network(of: adUnit)), "
                  + "which is not one of this key's networks (\(networks.codes.joined(separator: ", "))): send it with a key of that network")
        }
        let formatId: String?
        if isLoad {
            formatId = v.optional(value, "formatId") { text in Self.checkFormatId(text) } ?? ""
        } else {
            formatId = v.required(value, "formatId", hint: "a custom format ID (digits) or native, app_install, content") { text in
                Self.checkFormatId(text)
            }
        }
        let occurredAt = v.required(value, "occurredAt", hint: "an RFC 3339 time such as 2026-11-20T10:00:01.950Z") { text in
            Timestamp(rfc3339: text).map(Check.ok)
                ?? .broken("must be an RFC 3339 time with Z or a numeric offset (e.g. 2026-11-20T10:00:01.950Z)")
        }
        // A load has no ad yet, so nothing of it can be clicked: the click's fields do not
        // belong to a load's events (PROTOCOL.md 10).
        if let type, isLoad {
            for field in ["assetKey", "clickAction"] where v.isPresent(value, field) {
                v.add(about: field, "\(field) is a field of an ad's events, not of \(type.rawValue): a load has no ad yet to click")
            }
        }
        let assetKey = isLoad ? nil : v.optional(value, "assetKey") { text in Self.checkIdentifier(text, maxCharacters: 64) }
        if type == .click, assetKey == nil, !v.mentions("assetKey") {
            v.add(about: "assetKey", "assetKey is required for click: the asset name passed to performClickOnAsset (e.g. MainImage)")
        }
        let clickAction = isLoad ? nil : v.optional(value, "clickAction") { text in
            ClickAction(rawValue: text).map(Check.ok) ?? .broken("must be one of \(Self.list(ClickAction.self))")
        }
        let source = v.optional(value, "source") { text in
            EventSource(rawValue: text).map(Check.ok) ?? .broken("must be one of \(Self.list(EventSource.self))")
        }
        let adapter = v.optional(value, "adapter") { text in
            Self.checkIdentifier(text, maxCharacters: 64, allowEmpty: type != .mediationResult)
        }
        let eea = v.flag(value, "eea")
        let reservation = v.flag(value, "reservation")
        let test = v.flag(value, "test")
        let attributes = v.attributes(value, limits: limits)
        let userAgent = v.optional(value, "userAgent") { text in
            Self.checkIdentifier(text, maxCharacters: EventClient.maxUserAgentCharacters)
        }
        let ip = v.optional(value, "ip") { text in
            IPAddress(text).map(Check.ok) ?? .broken("must be an IPv4 or IPv6 address such as 203.0.113.7 or 2001:db8::1")
        }
        if !serverKey {
            for field in ["userAgent", "ip"] where value.member(field).map({ if case .null = $0 { false } else { true } }) ?? false {
                v.add(about: field, "\(field) may be set only with a server key (tracker keys create --scope ingest --server): "
                      + "it names the device an event came from, which only a server sending on the devices' behalf knows")
            }
        }

        let funnel = type.map { funnelFields(value, type: $0, adapter: adapter, into: &v) } ?? FunnelFields()

        var correctedAt: Timestamp?
        if let occurredAt {
            switch correct(occurredAt: occurredAt) {
            case .ok(let t): correctedAt = t
            case .broken(let message, _): v.add(about: "occurredAt", message)
            }
        }

        guard v.isEmpty, let id, let type, requestId != nil || isLoad, let adUnit, let formatId, let occurredAt, let correctedAt else {
            return .failure(v)
        }
        return .success(TrackingEvent(
            id: id, type: type, requestId: requestId, adUnit: adUnit, formatId: formatId,
            assetKey: assetKey, clickAction: clickAction, source: source ?? .app, adapter: adapter,
            eea: eea, reservation: reservation, test: test, attributes: attributes,
            occurredAt: occurredAt, sentAt: sentAt, receivedAt: receivedAt, correctedAt: correctedAt,
            loadId: funnel.loadId, adsRequested: funnel.adsRequested, latencyMs: funnel.latencyMs,
            errorCode: funnel.errorCode, result: funnel.result, position: funnel.position,
            userAgent: userAgent, clientIP: ip))
    }

    /// The funnel's fields of an event (PROTOCOL.md 10), each on the types it belongs to only.
    struct FunnelFields {
        var loadId: String?
        var adsRequested: Int?
        var latencyMs: Int?
        var errorCode: AdErrorCode?
        var result: MediationResult?
        var position: Int?
    }

    /// The types each funnel field belongs to; set on any other type, the field is refused.
    static let funnelFieldTypes: [(field: String, types: [EventType])] = [
        ("loadId", [.adRequest, .adFailed, .mediationResult, .adLoaded]),
        ("adsRequested", [.adRequest]),
        ("latencyMs", [.adLoaded, .adFailed, .mediationResult]),
        ("errorCode", [.adFailed, .mediationResult]),
        ("result", [.mediationResult]),
        ("position", [.mediationResult]),
    ]

    func funnelFields(_ value: JSONValue, type: EventType, adapter: String?, into v: inout Violations) -> FunnelFields {
        for (field, types) in Self.funnelFieldTypes where !types.contains(type) && v.isPresent(value, field) {
            v.add(about: field, "\(field) is a field of \(types.map(\.rawValue).joined(separator: ", ")) events only, not of \(type.rawValue)")
        }
        var out = FunnelFields()
        let loadIdRule = { (text: String) in Self.checkIdentifier(text, maxCharacters: 128) }
        switch type {
        case .adRequest, .adFailed, .mediationResult:
            out.loadId = v.required(value, "loadId", hint: "the id of the load (one loadRequest: call), 1 to 128 characters", loadIdRule)
        case .adLoaded:
            out.loadId = v.optional(value, "loadId", loadIdRule)
        default:
            break
        }
        if type == .adRequest {
            out.adsRequested = v.integer(value, "adsRequested", in: FunnelLimits.adsRequested) ?? 1
        }
        if [.adLoaded, .adFailed, .mediationResult].contains(type) {
            out.latencyMs = v.integer(value, "latencyMs", in: FunnelLimits.latencyMs)
        }
        let errorRule = { (text: String) -> Check<AdErrorCode> in
            AdErrorCode(rawValue: text).map(Check.ok) ?? .broken("must be one of \(Self.list(AdErrorCode.self))")
        }
        switch type {
        case .adFailed:
            out.errorCode = v.required(value, "errorCode", hint: "the SDK's error, one of \(Self.list(AdErrorCode.self))", errorRule)
        case .mediationResult:
            out.result = v.required(value, "result", hint: "one of \(Self.list(MediationResult.self))") { text in
                MediationResult(rawValue: text).map(Check.ok) ?? .broken("must be one of \(Self.list(MediationResult.self))")
            }
            if out.result == .failed {
                out.errorCode = v.required(value, "errorCode", hint: "the network's error when result is failed, one of \(Self.list(AdErrorCode.self))",
                                           errorRule)
            } else {
                out.errorCode = v.optional(value, "errorCode", errorRule)
            }
            if adapter == nil, !v.mentions("adapter") {
                v.add(about: "adapter", "adapter is required for mediation_result: the name of the network that answered")
            }
            out.position = v.integer(value, "position", in: FunnelLimits.position)
            if out.position == nil, !v.mentions("position") {
                v.add(about: "position", "position is required for mediation_result: the network's place in the waterfall, 1 to 100")
            }
        default:
            break
        }
        return out
    }

    /// PROTOCOL.md section 3: the time every report uses, or why the event is refused.
    func correct(occurredAt: Timestamp) -> Check<Timestamp> {
        let corrected: Timestamp
        if let sentAt {
            if occurredAt - sentAt > Self.maxAheadOfSentAt {
                return .broken("occurredAt (\(occurredAt.rfc3339)) is more than 1 s after the batch's sentAt (\(sentAt.rfc3339)): an event cannot happen after it was sent (check how the app stamps occurredAt and sentAt)")
            }
            corrected = receivedAt - (sentAt - occurredAt)
        } else {
            if occurredAt - receivedAt > Self.maxAheadWithoutSentAt {
                return .broken("occurredAt (\(occurredAt.rfc3339)) is more than 24 h after the server's time (\(receivedAt.rfc3339)): the device clock is wrong (send sentAt with the batch so the tracker can correct it)")
            }
            corrected = min(occurredAt, receivedAt)
        }
        if corrected < Self.earliestCorrectedTime {
            return .broken("occurredAt (\(occurredAt.rfc3339)) gives a corrected time before 1970-01-01: the device clock is wrong")
        }
        return .ok(corrected)
    }

    // MARK: Field rules

    /// What is wrong with `text` as a `requestId` or `loadId` (1 to 128 characters, no control
    /// characters), or `nil`: the rule an audit trail checks its path segment by.
    public static func identifierProblem(_ text: String, field: String = "requestId") -> String? {
        if case .broken(let message, _) = checkIdentifier(text, maxCharacters: 128) { return "\(field) " + message }
        return nil
    }

    static func checkIdentifier(_ text: String, maxCharacters: Int, allowEmpty: Bool = false) -> Check<String> {
        let count = text.unicodeScalars.count
        if count == 0, !allowEmpty { return .broken("must not be empty (1 to \(maxCharacters) characters)", showValue: false) }
        if count > maxCharacters { return .broken("must be at most \(maxCharacters) characters, got \(count)", showValue: false) }
        if text.unicodeScalars.contains(where: isControl) { return .broken("must not contain control characters") }
        return .ok(text)
    }

    /// `/` + network code digits + one or more `/segment`; segments are non-empty and hold
    /// no whitespace or control characters. One pass over the bytes: ASCII is decided
    /// byte by byte, and only a non-ASCII scalar asks the Unicode tables.
    static func checkAdUnit(_ text: String) -> Check<String> {
        let rule = "must be '/' + the network code (digits) + one or more '/segment', e.g. /6499/example/native"
        let count = text.unicodeScalars.count
        if count > 256 { return .broken("must be at most 256 characters, got \(count)", showValue: false) }
        var part = 0  // 0: before the first '/', 1: the network code, 2...: segments
        var partLength = 0
        for scalar in text.unicodeScalars {
            if scalar == "/" {
                if part > 0, partLength == 0 { return .broken(rule) }
                part += 1
                partLength = 0
                continue
            }
            partLength += 1
            switch part {
            case 0: return .broken(rule)
            case 1: guard scalar.value >= 0x30, scalar.value <= 0x39 else { return .broken(rule) }
            default:
                let blank = scalar.isASCII ? scalar.value <= 0x20 || scalar.value == 0x7F : isControl(scalar) || scalar.properties.isWhitespace
                if blank { return .broken("must not contain spaces or control characters (a path such as /6499/example/native)") }
            }
        }
        guard part >= 2, partLength > 0 else { return .broken(rule) }
        return .ok(text)
    }

    static func checkFormatId(_ text: String) -> Check<String> {
        if SystemFormat(rawValue: text) != nil { return .ok(text) }
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            // A bound on what one event may make a row key of; Ad Manager's IDs have 8 to 11 digits.
            return text.utf8.count <= 64 ? .ok(text) : .broken("must be at most 64 digits, got \(text.utf8.count)", showValue: false)
        }
        return .broken("must be a custom native format ID (digits, e.g. 10063170) or one of \(list(SystemFormat.self))")
    }

    /// General category Cc: C0 controls, DEL and C1 controls.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    static func list<T: CaseIterable & RawRepresentable>(_: T.Type) -> String where T.RawValue == String {
        T.allCases.map(\.rawValue).joined(separator: ", ")
    }
}

/// A field's value that passed its rule, or the rule it broke (a sentence without the field's name).
enum Check<T> {
    case ok(T)
    /// `showValue`: whether the message should quote what was sent (not for "too long").
    case broken(String, showValue: Bool = true)
}

/// The rules one event breaks, each a sentence that names the field.
package struct Violations: Error, Sendable, Equatable {
    package private(set) var messages: [String] = []
    private var fields: Set<String> = []
    /// The field of the first rule broken (`event` when the event is not an object), for metrics.
    private(set) var firstField: String?

    package init(_ messages: [String] = []) {
        self.messages = messages
    }

    package var isEmpty: Bool { messages.isEmpty }
    package var text: String { messages.joined(separator: "; ") }

    mutating func add(_ message: String) {
        messages.append(message)
    }

    /// A broken rule about `field` that the generic checks below do not see.
    mutating func add(about field: String, _ message: String) {
        if firstField == nil { firstField = field }
        messages.append(message)
    }

    func mentions(_ field: String) -> Bool { fields.contains(field) }

    /// Whether the event sets `field` (JSON `null` counts as absent).
    func isPresent(_ event: JSONValue, _ field: String) -> Bool {
        guard let value = event.member(field) else { return false }
        return value != .null
    }

    /// An optional integer field within `range`; absent and `null` give `nil`.
    mutating func integer(_ event: JSONValue, _ field: String, in range: ClosedRange<Int>) -> Int? {
        guard let value = event.member(field), value != .null else { return nil }
        let rule = "\(field) must be an integer from \(range.lowerBound) to \(range.upperBound)"
        guard case .number(let text) = value else {
            add(field, "\(rule), got \(value.typeName)")
            return nil
        }
        guard let number = Int(text), range.contains(number) else {
            add(field, "\(rule), got \(Self.excerpt(text))")
            return nil
        }
        return number
    }

    private mutating func add(_ field: String, _ message: String) {
        if firstField == nil { firstField = field }
        fields.insert(field)
        messages.append(message)
    }

    /// A required string field, checked by `rule`; `null` counts as absent.
    mutating func required<T>(_ event: JSONValue, _ field: String, hint: @autoclosure () -> String, _ rule: (String) -> Check<T>) -> T? {
        guard let value = event.member(field), value != .null else {
            add(field, "\(field) is required: \(hint())")
            return nil
        }
        return check(field, value, rule)
    }

    /// An optional string field; absent and `null` give `nil`.
    mutating func optional<T>(_ event: JSONValue, _ field: String, _ rule: (String) -> Check<T>) -> T? {
        guard let value = event.member(field), value != .null else { return nil }
        return check(field, value, rule)
    }

    private mutating func check<T>(_ field: String, _ value: JSONValue, _ rule: (String) -> Check<T>) -> T? {
        guard case .string(let text) = value else {
            add(field, "\(field) must be a string, got \(value.typeName)")
            return nil
        }
        switch rule(text) {
        case .ok(let t): return t
        case .broken(let message, let showValue):
            add(field, "\(field) \(message)" + (showValue ? ", got '\(Self.excerpt(text))'" : ""))
            return nil
        }
    }

    /// `eea`, `reservation`, `test`: JSON booleans, false when absent.
    mutating func flag(_ event: JSONValue, _ field: String) -> Bool {
        switch event.member(field) {
        case nil, .null?: return false
        case .bool(let b)?: return b
        case let other?:
            add(field, "\(field) must be true or false, got \(other.typeName)")
            return false
        }
    }

    /// A flat object of string, number and boolean values within the limits.
    mutating func attributes(_ event: JSONValue, limits: IngestLimits) -> [(key: String, value: AttributeValue)] {
        guard let value = event.member("attributes"), value != .null else { return [] }
        guard case .object(let members) = value else {
            add("attributes", "attributes must be an object of string, number or boolean values, got \(value.typeName)")
            return []
        }
        var out: [(key: String, value: AttributeValue)] = []
        var position: [String: Int] = [:]
        var ok = true
        for (key, member) in members {
            let attribute: AttributeValue
            switch member {
            case .string(let s): attribute = .string(s)
            case .bool(let b): attribute = .bool(b)
            case .number(let n):
                guard Self.isStorableNumber(n) else {
                    add("attributes", "attributes.\(Self.excerpt(key)) is a number the log cannot store: a number is 0 or between 5e-324 and 1.8e308 in magnitude (a double's range), with an exponent from -1000 to 1000 and at most 1000 decimal places; got \(Self.excerpt(n))")
                    ok = false
                    continue
                }
                attribute = .number(n)
            default:
                add("attributes", "attributes.\(Self.excerpt(key)) must be a string, number or boolean (attributes are flat), got \(member.typeName)")
                ok = false
                continue
            }
            if key.utf8.contains(0) || (attribute.stringValue?.utf8.contains(0) ?? false) {
                add("attributes", "attributes.\(Self.excerpt(key)) must not contain the character U+0000")
                ok = false
                continue
            }
            if let i = position[key] {
                out[i].value = attribute  // a repeated key: the last one wins, as in JSON.parse
            } else {
                position[key] = out.count
                out.append((key, attribute))
            }
        }
        guard ok else { return [] }
        if out.count > limits.maxAttributes {
            add("attributes", "attributes has \(out.count) keys; at most \(limits.maxAttributes) are allowed")
            return []
        }
        let bytes = AttributeValue.json(out)?.utf8.count ?? 0
        if bytes > limits.maxAttributeBytes {
            add("attributes", "attributes is \(bytes) bytes as JSON; at most \(limits.maxAttributeBytes) bytes are allowed")
            return []
        }
        return out
    }

    /// Whether a JSON number (as written, already valid JSON) is one the log's `jsonb` stores.
    ///
    /// A double's range alone does not do: `1e-20000` reads as the double 0.0, but `jsonb` keeps
    /// numbers as `numeric`, which refuses it (22003, and the whole group's write with it), and
    /// writes `0e-900` out as 900 zeros. So a number must also be a double without underflow,
    /// with its exponent and its decimal places (after the exponent) within 1000 each.
    static func isStorableNumber(_ text: String) -> Bool {
        guard let double = Double(text), double.isFinite else { return false }
        var fractionDigits = 0, exponent = 0, exponentNegative = false
        var nonzero = false, inFraction = false, inExponent = false
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "."): inFraction = true
            case UInt8(ascii: "e"), UInt8(ascii: "E"): inExponent = true
            case UInt8(ascii: "-") where inExponent: exponentNegative = true
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                let digit = Int(b - UInt8(ascii: "0"))
                if inExponent {
                    exponent = min(exponent * 10 + digit, 1_000_000)  // saturates: far past any limit
                } else {
                    if digit != 0 { nonzero = true }
                    if inFraction { fractionDigits += 1 }
                }
            default: break
            }
        }
        if exponentNegative { exponent = -exponent }
        if nonzero && double == 0 { return false }  // below the smallest double: it read as 0
        return (-1000...1000).contains(exponent) && fractionDigits - exponent <= 1000
    }

    /// What was sent, shortened so a message stays readable.
    package static func excerpt(_ text: String) -> String {
        let scalars = text.unicodeScalars
        guard scalars.count > 64 else { return text.escapingControls }
        return String(String.UnicodeScalarView(scalars.prefix(64))).escapingControls + "…"
    }
}

extension String {
    /// Control characters shown as `\u{…}` so a message never carries raw ones.
    fileprivate var escapingControls: String {
        guard unicodeScalars.contains(where: EventRules.isControl) else { return self }
        var out = ""
        for s in unicodeScalars {
            if EventRules.isControl(s) { out += "\\u{" + String(s.value, radix: 16) + "}" } else { out.unicodeScalars.append(s) }
        }
        return out
    }
}

extension AttributeValue {
    var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// Attributes as one compact JSON object (what the log stores as `jsonb`); `nil` when empty.
    static func json(_ attributes: [(key: String, value: AttributeValue)]) -> String? {
        guard !attributes.isEmpty else { return nil }
        var out = "{"
        for (i, (key, value)) in attributes.enumerated() {
            if i > 0 { out += "," }
            JSONText.appendQuoted(key, to: &out)
            out += ":"
            switch value {
            case .string(let s): JSONText.appendQuoted(s, to: &out)
            case .number(let n): out += n
            case .bool(let b): out += b ? "true" : "false"
            }
        }
        return out + "}"
    }
}

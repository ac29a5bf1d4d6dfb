/// Web beacons: signed pixel and click URLs for ads a browser renders, where no bearer key
/// can be sent. Minting validates the event with the rules of `/v1/events`; receiving
/// verifies the signature, then validates again with the same rules at the browser's time.
public struct Beacons: Sendable {
    /// A token is valid this long unless its minter says otherwise: a page left open for a
    /// day still records its clicks; later ones redirect but are stored as rejected.
    public static let defaultLifetimeSeconds: Int64 = 86_400
    /// Tokens live at most 30 days: a leaked URL cannot record events forever.
    public static let maxLifetimeSeconds: Int64 = 30 * 86_400
    /// At most this many beacons per `POST /v1/beacons`.
    public static let maxPerRequest = 100
    /// A destination URL longer than this is refused (browsers and proxies cut long URLs).
    public static let maxDestinationBytes = 2048

    public let secrets: BeaconSecrets
    private let limits: IngestLimits

    public init(secrets: BeaconSecrets, limits: IngestLimits = IngestLimits()) {
        self.secrets = secrets
        self.limits = limits
    }

    // MARK: Minting

    /// A signed beacon for one event: its token and the path that carries it.
    ///
    /// With `networks` (a key scoped to networks: PROTOCOL.md 11), an event of another network's
    /// ad unit is refused as `/v1/events` rejects it: the token is the minter's word, so the
    /// minter's scope is checked here, where its key is known, and the signature carries it.
    public func mint(_ order: BeaconOrder, issuer: String, now: Timestamp,
                     networks: NetworkScope? = nil) throws(BeaconOrderError) -> MintedBeacon {
        guard case .object(var members) = order.event else {
            throw BeaconOrderError(field: "event", rule: "must be an object with the event's fields as /v1/events takes them (without occurredAt)")
        }
        for field in ["occurredAt", "sentAt"] where order.event.member(field) != nil {
            throw BeaconOrderError(field: "event.\(field)", rule: "must not be set: a beacon's time is when the browser fetches it (the server's receive time)")
        }
        if order.event.member("id") == nil || order.event.member("id") == .null {
            members.removeAll { $0.key == "id" }
            members.insert((key: "id", value: .string(PackedUUID.v7(at: now).text)), at: 0)
        }
        let event = JSONValue.object(members)
        let validated: TrackingEvent
        switch validate(event, at: now, networks: networks) {
        case .success(let e): validated = e
        case .failure(let violations): throw BeaconOrderError(field: "event", rule: "is not a valid event: \(violations.text)")
        }
        let endpoint = BeaconEndpoint(for: validated.type)
        switch (endpoint, order.destination) {
        case (.click, nil):
            throw BeaconOrderError(field: "destination", rule: "is required for a \(validated.type.rawValue) beacon: the URL /v1/click redirects to")
        case (.click, let destination?):
            if let problem = Self.destinationProblem(destination) { throw BeaconOrderError(field: "destination", rule: problem) }
        case (.pixel, .some):
            throw BeaconOrderError(field: "destination", rule: "is only for click and adchoices_click beacons; a \(validated.type.rawValue) beacon is a pixel")
        case (.pixel, nil):
            break
        }
        let lifetime = order.expiresInSeconds ?? Self.defaultLifetimeSeconds
        guard (1...Self.maxLifetimeSeconds).contains(lifetime) else {
            throw BeaconOrderError(field: "expiresIn", rule: "must be 1 to \(Self.maxLifetimeSeconds) seconds (30 days), got \(lifetime)")
        }
        guard APIKeys.isValidName(issuer) else {
            throw BeaconOrderError(field: "issuer", rule: "must be 1 to 64 letters, digits, '.', '_' or '-', got '\(Violations.excerpt(issuer))'")
        }
        let expiresAt = now.microseconds / Timestamp.microsecondsPerSecond + lifetime
        let claims = BeaconClaims(event: event, destination: order.destination, expiresAt: expiresAt, issuer: issuer)
        let token = BeaconToken.sign(claims, with: secrets)
        return MintedBeacon(
            id: validated.id, type: validated.type, token: token, path: endpoint.path + "?t=" + token,
            expiresAt: Timestamp(microseconds: expiresAt * Timestamp.microsecondsPerSecond))
    }

    /// Every beacon of a `POST /v1/beacons` body, `{"beacons": [{"event": {…}, "destination": "…", "expiresIn": 86400}]}`;
    /// all or nothing, the first fault named with its index.
    /// With `networks`, every beacon's ad unit must be of those networks (as `mint(_:issuer:now:networks:)`).
    public func mint(requestBody body: [UInt8], issuer: String, now: Timestamp,
                     networks: NetworkScope? = nil) throws(BeaconOrderError) -> [MintedBeacon] {
        let document: JSONValue
        do {
            document = try JSONReader.parse(body)
        } catch {
            throw BeaconOrderError(field: "body", rule: "is not valid JSON: \(error.description)")
        }
        guard case .array(let items)? = document.member("beacons") else {
            throw BeaconOrderError(field: "beacons", rule: "is required: an array of {\"event\": {…}, \"destination\": \"…\", \"expiresIn\": seconds}")
        }
        guard (1...Self.maxPerRequest).contains(items.count) else {
            throw BeaconOrderError(field: "beacons", rule: "must hold 1 to \(Self.maxPerRequest) beacons, got \(items.count)")
        }
        var minted: [MintedBeacon] = []
        for (index, item) in items.enumerated() {
            do throws(BeaconOrderError) {
                minted.append(try mint(BeaconOrder(item), issuer: issuer, now: now, networks: networks))
            } catch {
                throw BeaconOrderError(field: "beacons[\(index)].\(error.field)", rule: error.rule)
            }
        }
        return minted
    }

    // MARK: Receiving

    /// What a browser's fetch of `endpoint` with `token` records, or why nothing may happen.
    ///
    /// Only an authentic token for this endpoint gets this far; an expired one, or one whose
    /// event no longer passes the rules, becomes a rejection (a click still redirects).
    public func receive(_ token: String, at endpoint: BeaconEndpoint, receivedAt: Timestamp) throws(BeaconTokenError) -> BeaconVisit {
        let claims = try BeaconToken.verify(token, with: secrets)
        let typeText: String? = if case .string(let t)? = claims.event.member("type") { t } else { nil }
        let type = typeText.flatMap(EventType.init(rawValue:))
        if let type, BeaconEndpoint(for: type) != endpoint {
            throw .wrongEndpoint("this token is for a \(type.rawValue) event: use \(BeaconEndpoint(for: type).path)")
        }
        if endpoint == .click {
            guard let destination = claims.destination, Self.destinationProblem(destination) == nil else {
                throw .wrongEndpoint("this token has no http(s) destination to redirect to")
            }
        }
        let keyName = BeaconVisit.keyNamePrefix + claims.issuer
        let expiresAt = Timestamp(microseconds: claims.expiresAt * Timestamp.microsecondsPerSecond)
        func rejection(_ reason: BeaconRejection.Reason, _ message: String) -> BeaconVisit {
            let id: String? = if case .string(let i)? = claims.event.member("id") { i } else { nil }
            let requestId: String? = if case .string(let r)? = claims.event.member("requestId") { r } else { nil }
            var eventJSON = ""
            claims.event.appendCompact(to: &eventJSON)
            return BeaconVisit(destination: claims.destination, keyName: keyName, outcome: .reject(BeaconRejection(
                eventId: id, type: typeText, requestId: requestId, reason: reason, message: message,
                eventJSON: eventJSON, destination: claims.destination, expiresAt: expiresAt, issuer: claims.issuer,
                receivedAt: receivedAt)))
        }
        if receivedAt > expiresAt {
            let late = (receivedAt - expiresAt).components.seconds
            return rejection(.expired, "the beacon expired at \(expiresAt.rfc3339), \(late) s before it was received; mint beacons with a longer expiresIn if pages stay open longer")
        }
        switch validate(claims.event, at: receivedAt) {
        case .success(let event):
            return BeaconVisit(destination: claims.destination, keyName: keyName, outcome: .record(event))
        case .failure(let violations):
            return rejection(.invalid, violations.text)
        }
    }

    /// PROTOCOL.md 1 and 3 by the validator of `/v1/events`: the event as sent, its `occurredAt`
    /// the server's time and no `sentAt`, so the corrected time is the receive time; with
    /// `networks`, the scope's rule too (only when minting: a signed token is not checked again).
    private func validate(_ event: JSONValue, at time: Timestamp, networks: NetworkScope? = nil) -> Result<TrackingEvent, Violations> {
        guard case .object(var members) = event else {
            return .failure(Violations(["the event must be a JSON object"]))
        }
        members.removeAll { $0.key == "occurredAt" }
        members.append((key: "occurredAt", value: .string(time.rfc3339)))
        return EventRules(limits: limits, receivedAt: time, sentAt: nil, networks: networks).validate(.object(members))
    }

    /// Why `text` may not be a redirect target, or `nil`: an absolute http(s) URL of printable
    /// ASCII (no spaces, no control characters, so it cannot split the `Location` header).
    static func destinationProblem(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard bytes.count <= maxDestinationBytes else {
            return "must be at most \(maxDestinationBytes) bytes, got \(bytes.count)"
        }
        let lower = String(decoding: bytes.prefix(8), as: UTF8.self).lowercased()
        let schemeLength = lower.hasPrefix("https://") ? 8 : lower.hasPrefix("http://") ? 7 : 0
        guard schemeLength > 0, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) else {
            return "must be an absolute http:// or https:// URL of printable ASCII (percent-encode spaces and other characters), got '\(Violations.excerpt(text))'"
        }
        let authority = bytes[schemeLength...].prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        guard !authority.isEmpty else { return "must name a host after the scheme, got '\(Violations.excerpt(text))'" }
        return nil
    }
}

/// The two beacon endpoints: a pixel records what the browser showed, a click redirects.
public enum BeaconEndpoint: Sendable, Equatable {
    case pixel
    case click

    /// Clicks on the ad and on the AdChoices icon navigate; every other event is a pixel.
    public init(for type: EventType) {
        self = type == .click || type == .adchoicesClick ? .click : .pixel
    }

    public var path: String {
        switch self {
        case .pixel: "/v1/pixel.gif"
        case .click: "/v1/click"
        }
    }
}

/// One beacon to mint: the event, where its click goes, how long the token lives.
public struct BeaconOrder: Sendable {
    public var event: JSONValue
    public var destination: String?
    public var expiresInSeconds: Int64?

    public init(event: JSONValue, destination: String? = nil, expiresInSeconds: Int64? = nil) {
        self.event = event
        self.destination = destination
        self.expiresInSeconds = expiresInSeconds
    }

    /// From one element of `POST /v1/beacons`' `beacons`; type faults surface in `mint`.
    init(_ item: JSONValue) throws(BeaconOrderError) {
        guard case .object = item else {
            throw BeaconOrderError(field: "", rule: "must be an object {\"event\": {…}, \"destination\": \"…\", \"expiresIn\": seconds}, got \(item.typeName)")
        }
        guard let event = item.member("event") else {
            throw BeaconOrderError(field: "event", rule: "is required: the event's fields as /v1/events takes them, without occurredAt")
        }
        var destination: String?
        switch item.member("destination") {
        case nil, .null?: destination = nil
        case .string(let d)?: destination = d
        case let other?: throw BeaconOrderError(field: "destination", rule: "must be a URL as a string, got \(other.typeName)")
        }
        var expiresIn: Int64?
        switch item.member("expiresIn") {
        case nil, .null?: expiresIn = nil
        case .number(let n)?:
            guard let seconds = Int64(n) else {
                throw BeaconOrderError(field: "expiresIn", rule: "must be a whole number of seconds, got \(n)")
            }
            expiresIn = seconds
        case let other?: throw BeaconOrderError(field: "expiresIn", rule: "must be a number of seconds, got \(other.typeName)")
        }
        self.init(event: event, destination: destination, expiresInSeconds: expiresIn)
    }
}

/// Why a beacon cannot be minted: the field and the rule it breaks.
public struct BeaconOrderError: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var rule: String

    public var description: String { field.isEmpty ? rule : "\(field) \(rule)" }
}

/// A minted beacon: the token, the path to append to the tracker's public origin.
public struct MintedBeacon: Sendable, Equatable {
    public var id: PackedUUID
    public var type: EventType
    public var token: String
    /// `/v1/pixel.gif?t=…` or `/v1/click?t=…`.
    public var path: String
    public var expiresAt: Timestamp
}

/// What an authentic beacon fetch becomes.
public struct BeaconVisit: Sendable {
    public enum Outcome: Sendable {
        /// A valid event to append to the log, like one of a `/v1/events` batch.
        case record(TrackingEvent)
        /// Expired, or no longer valid: stored in `beacon_rejections`, never in the log.
        case reject(BeaconRejection)
    }

    /// Where a click redirects, whatever the outcome.
    public var destination: String?
    /// The log's `key_name` for the event: `beacon:` and the token's issuer.
    public var keyName: String
    /// What starts the `key_name` of every beacon's event, and no key's name (`APIKeys.nameRule`
    /// has no `:`): the invalid-traffic rules tell beacons from app events by it.
    public static let keyNamePrefix = "beacon:"
    public var outcome: Outcome
}

/// An authentic beacon the log does not take, and why.
public struct BeaconRejection: Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// Fetched after its expiry.
        case expired
        /// Its event breaks a rule of `/v1/events` now (e.g. signed by an older tracker with other rules).
        case invalid
    }

    public var eventId: String?
    public var type: String?
    public var requestId: String?
    public var reason: Reason
    public var message: String
    /// The signed event as compact JSON.
    public var eventJSON: String
    public var destination: String?
    public var expiresAt: Timestamp
    public var issuer: String
    public var receivedAt: Timestamp
}

/// Why a beacon URL is refused: nothing is recorded and a click does not redirect.
public enum BeaconTokenError: Error, Sendable, Equatable {
    case missing
    case malformed(String)
    /// Well-formed, but no secret produces its signature: changed after signing, or signed elsewhere.
    case badSignature
    /// Authentic, but for the other endpoint.
    case wrongEndpoint(String)

    /// What the page's developer should fix.
    public var message: String {
        switch self {
        case .missing:
            "the query parameter t is required: the signed beacon token from tracker beacon sign or POST /v1/beacons"
        case .malformed(let why):
            why
        case .badSignature:
            "the token's signature does not match: it was changed after it was signed, or signed with another secret; nothing was recorded"
        case .wrongEndpoint(let why):
            why
        }
    }
}

import Crypto

/// The server secrets that sign and verify beacon tokens (`TRACKER_BEACON_SECRET`, and
/// `TRACKER_BEACON_PREVIOUS_SECRET` while a rotation is under way).
///
/// New tokens are signed with the current secret only; tokens signed with the previous one
/// keep verifying, so a rotation does not break the pixels and links already on pages.
public struct BeaconSecrets: Sendable {
    /// A shorter secret could be guessed offline from one token; 32 bytes is SHA-256's block of strength.
    public static let minimumBytes = 32

    let current: SymmetricKey
    let previous: SymmetricKey?

    /// The secrets as their UTF-8 bytes (use `openssl rand -base64 32`, or any 32+ byte string).
    public init(current: String, previous: String? = nil) throws(BeaconSecretError) {
        guard current.utf8.count >= Self.minimumBytes else {
            throw .tooShort(variable: "TRACKER_BEACON_SECRET", bytes: current.utf8.count)
        }
        if let previous, previous.utf8.count < Self.minimumBytes {
            throw .tooShort(variable: "TRACKER_BEACON_PREVIOUS_SECRET", bytes: previous.utf8.count)
        }
        self.current = SymmetricKey(data: Array(current.utf8))
        self.previous = previous.map { SymmetricKey(data: Array($0.utf8)) }
    }

    var verifying: [SymmetricKey] { [current] + (previous.map { [$0] } ?? []) }
}

/// Why the beacon secrets cannot be used.
public enum BeaconSecretError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooShort(variable: String, bytes: Int)

    public var description: String {
        switch self {
        case .tooShort(let variable, let bytes):
            "\(variable) is \(bytes) bytes; at least \(BeaconSecrets.minimumBytes) are needed (make one with: openssl rand -base64 32)"
        }
    }
}

/// What a beacon token binds: one event without its time, where a click goes, until when
/// the token is valid, and who minted it. Changing any of it breaks the signature.
public struct BeaconClaims: Sendable, Equatable {
    /// The event's fields exactly as `/v1/events` takes them, without `occurredAt`: a beacon's
    /// time is when the browser fetches it.
    public var event: JSONValue
    /// Where `/v1/click` redirects; only click tokens have one.
    public var destination: String?
    /// Unix seconds after which the token no longer records events.
    public var expiresAt: Int64
    /// The key name (or `tracker beacon sign --issuer`) that minted the token; stored as the event's key.
    public var issuer: String

    /// The claims as the compact JSON object the token carries.
    var json: String {
        var out = "{\"v\":1,\"iss\":"
        JSONText.appendQuoted(issuer, to: &out)
        out += ",\"exp\":\(expiresAt)"
        if let destination {
            out += ",\"dest\":"
            JSONText.appendQuoted(destination, to: &out)
        }
        out += ",\"event\":"
        event.appendCompact(to: &out)
        return out + "}"
    }

    init?(json bytes: [UInt8]) {
        guard let value = try? JSONReader.parse(bytes), case .object = value,
              case .number("1")? = value.member("v"),
              case .string(let issuer)? = value.member("iss"),
              case .number(let exp)? = value.member("exp"), let expiresAt = Int64(exp),
              let event = value.member("event"), case .object = event
        else { return nil }
        var destination: String?
        switch value.member("dest") {
        case nil: destination = nil
        case .string(let d)?: destination = d
        default: return nil
        }
        self.init(event: event, destination: destination, expiresAt: expiresAt, issuer: issuer)
    }

    public init(event: JSONValue, destination: String?, expiresAt: Int64, issuer: String) {
        self.event = event
        self.destination = destination
        self.expiresAt = expiresAt
        self.issuer = issuer
    }
}

/// `<payload>.<signature>`: the claims as base64url JSON, then HMAC-SHA256 over a context
/// string and the payload, base64url. Readable by whoever holds a token (it is not secret),
/// unchangeable without the server's secret.
public enum BeaconToken {
    /// A token longer than this is refused before any work (a URL of a few KiB at most).
    public static let maxLength = 4096
    /// Separates these MACs from any other use of the same secret.
    static let context = Array("tracker-beacon-v1:".utf8)

    public static func sign(_ claims: BeaconClaims, with secrets: BeaconSecrets) -> String {
        let payload = Base64URL.encode(Array(claims.json.utf8))
        return payload + "." + Base64URL.encode(mac(payload, secrets.current))
    }

    /// The claims of an authentic token.
    public static func verify(_ token: String, with secrets: BeaconSecrets) throws(BeaconTokenError) -> BeaconClaims {
        guard !token.isEmpty else { throw .missing }
        guard token.utf8.count <= maxLength else {
            throw .malformed("the token is \(token.utf8.count) characters; beacon tokens are at most \(maxLength)")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let payload = Base64URL.decode(parts[0]), let signature = Base64URL.decode(parts[1]) else {
            throw .malformed("the token must be <payload>.<signature> in base64url, as tracker beacon sign or POST /v1/beacons made it (was the URL cut or re-encoded?)")
        }
        guard signature.count == SHA256.byteCount,
              secrets.verifying.contains(where: { key in
                  HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: context + Array(parts[0].utf8), using: key)
              })
        else { throw .badSignature }
        guard let claims = BeaconClaims(json: payload) else {
            throw .malformed("the token is signed by this tracker but its claims are not version 1 (a token from a newer tracker?)")
        }
        return claims
    }

    static func mac(_ payload: String, _ key: SymmetricKey) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: context + Array(payload.utf8), using: key))
    }
}

extension JSONValue {
    /// Compact JSON text; object members keep their order.
    func appendCompact(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): out += n
        case .string(let s): JSONText.appendQuoted(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.appendCompact(to: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (i, member) in members.enumerated() {
                if i > 0 { out += "," }
                JSONText.appendQuoted(member.key, to: &out)
                out += ":"
                member.value.appendCompact(to: &out)
            }
            out += "}"
        }
    }
}

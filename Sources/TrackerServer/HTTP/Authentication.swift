import HTTPTypes
import Hummingbird
import Tracker

extension APIKeys {
    /// The principal behind the request's bearer key, checked against the scope the route needs.
    func principal(for request: Request, requiring scope: KeyScope) async throws -> Principal {
        guard let header = request.headers[.authorization] else {
            throw APIError(.unauthorized, "send your key as 'Authorization: Bearer <key>'")
        }
        guard let key = Self.bearerKey(header) else {
            throw APIError(.unauthorized, "the Authorization header must be 'Bearer <key>'")
        }
        guard !key.isEmpty, key.utf8.count <= 256, let principal = try await authenticate(key) else {
            throw APIError(.unauthorized, "unknown or revoked key")
        }
        guard principal.scope == scope else {
            throw APIError(.forbidden, "key '\(principal.name)' has the \(principal.scope.rawValue) scope; this endpoint needs a key with the \(scope.rawValue) scope")
        }
        return principal
    }

    /// The key of an `Authorization: Bearer <key>` header (the scheme in any case, spaces
    /// around the key dropped), or `nil` for another scheme. On every request: bytes, no
    /// splitting into substrings.
    static func bearerKey(_ header: String) -> String? {
        var rest = Substring(header).utf8[...]
        while rest.first == UInt8(ascii: " ") { rest.removeFirst() }
        guard rest.count > 7, rest.prefix(6).elementsEqual("bearer".utf8, by: { ASCII.lowercased($0) == $1 }),
              rest.dropFirst(6).first == UInt8(ascii: " ") else { return nil }
        return String(Substring(ASCII.trimmingSpaces(rest.dropFirst(7))))
    }
}

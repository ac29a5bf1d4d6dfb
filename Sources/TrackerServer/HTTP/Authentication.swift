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

    /// The key of an `Authorization: Bearer <key>` header, or `nil` for another scheme.
    static func bearerKey(_ header: String) -> String? {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1]).trimmingSpaces
    }
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return String(s)
    }
}

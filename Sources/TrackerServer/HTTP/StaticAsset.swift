import HTTPTypes
import Hummingbird
import NIOCore

/// A file of the repository compiled into the binary: an installed binary or a container
/// has no repository. `scripts/embed-web.sh` writes them (`WebFiles+Embedded.swift`); a unit
/// test fails when an embedded copy and its file drift apart.
struct EmbeddedFile: Sendable {
    /// The file's path in the repository.
    let source: String
    let text: String
}

/// A body served as it is, with its media type, caching, a strong `ETag` and the browser
/// security headers, so a revisit costs a `304` instead of the bytes.
struct StaticAsset: Sendable {
    let body: ByteBuffer
    let etag: String
    let headers: HTTPFields

    /// `cacheControl` says how long a browser may reuse it without asking (`no-cache`: always ask).
    init(bytes: some Collection<UInt8>, mediaType: String, cacheControl: String) {
        var buffer = ByteBufferAllocator().buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        body = buffer
        etag = "\"" + Self.fingerprint(bytes) + "\""
        var headers = PageSecurity.headers
        headers[.contentType] = mediaType
        headers[.cacheControl] = cacheControl
        headers[.eTag] = etag
        self.headers = headers
    }

    init(text: String, mediaType: String, cacheControl: String) {
        self.init(bytes: Array(text.utf8), mediaType: mediaType, cacheControl: cacheControl)
    }

    /// `304` when the request's `If-None-Match` names this body's `ETag`, else `200` with the body.
    func response(to request: Request) -> Response {
        if let condition = request.headers[.ifNoneMatch], Self.matches(ifNoneMatch: condition, etag: etag) {
            var notModified = headers
            notModified[.contentType] = nil
            return Response(status: .notModified, headers: notModified)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    /// RFC 9110 13.1.2: `*`, or a list of entity tags compared weakly (`W/` is ignored).
    static func matches(ifNoneMatch condition: String, etag: String) -> Bool {
        condition.split(separator: ",").contains { candidate in
            var tag = Substring(String(candidate).trimmingSpaces)
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag = tag.dropFirst(2) }
            return tag == etag
        }
    }

    /// 64-bit FNV-1a of the bytes as hex: a validator, not a security measure.
    static func fingerprint(_ bytes: some Sequence<UInt8>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// The headers every page file carries: scripts, styles and requests only from this server
/// and no inline script (so an ad unit name that smuggles markup cannot run), no MIME
/// sniffing, and no Referer (the page's address says which dashboard a user reads).
enum PageSecurity {
    static let contentSecurityPolicy = [
        "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
        "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
    ].joined(separator: "; ")

    static let headers: HTTPFields = [
        .contentSecurityPolicy: contentSecurityPolicy,
        .xContentTypeOptions: "nosniff",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
    ]
}

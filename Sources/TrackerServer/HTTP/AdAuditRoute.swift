import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// `GET /v1/ads/{requestId}`: one ad's audit trail (report scope).
struct AdAuditRoute: Sendable {
    let keys: APIKeys
    let audit: AdAudit

    func register(on router: Router<some RequestContext>) {
        router.get("/v1/ads/:requestId") { request, context in
            try await handle(request, context: context)
        }
    }

    func handle(_ request: Request, context: some RequestContext) async throws -> Response {
        _ = try await keys.principal(for: request, requiring: .report)
        let requestId = try Self.requestId(percentEncoded: context.parameters.get("requestId") ?? "")
        let includeTest: Bool
        do {
            includeTest = try ReportQuery.includeTest(request.uri.queryParameters.get("includeTest"))
        } catch {
            throw APIError.from(error)
        }
        guard let (explanation, lag) = try await audit.explain(requestId: requestId, includeTest: includeTest) else {
            throw APIError(.notFound, "no stored event has the requestId '\(requestId)' (or the projector has not reached it yet)")
        }
        var headers = ReportRoutes.privateFigures
        headers[.contentType] = "application/json"
        headers[HTTPField.Name("X-Projection-Lag-Events")!] = String(lag.events)
        headers[HTTPField.Name("X-Projection-Lag-Seconds")!] = String(lag.seconds)
        headers[HTTPField.Name("X-IVT-Rules")!] = String(explanation.ivtRules)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: explanation.json)))
    }

    /// The path segment, percent-decoded and checked by PROTOCOL.md 1's rule for `requestId`.
    static func requestId(percentEncoded segment: String) throws -> String {
        var bytes: [UInt8] = []
        var utf8 = segment.utf8.makeIterator()
        while let b = utf8.next() {
            guard b == UInt8(ascii: "%") else { bytes.append(b); continue }
            guard let h = utf8.next().flatMap(Self.hexValue), let l = utf8.next().flatMap(Self.hexValue) else {
                throw APIError(.invalidParameter, "requestId is not percent-encoded correctly")
            }
            bytes.append(h << 4 | l)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw APIError(.invalidParameter, "requestId must be UTF-8 once percent-decoded")
        }
        let count = text.unicodeScalars.count
        guard (1...128).contains(count), !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError(.invalidParameter, "requestId must be 1 to 128 characters without control characters, got \(count) characters")
        }
        return text
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

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
        guard let bytes = PercentDecoding.decode(segment, plusIsSpace: false, malformed: .refused) else {
            throw APIError(.invalidParameter, "requestId is not percent-encoded correctly")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw APIError(.invalidParameter, "requestId must be UTF-8 once percent-decoded")
        }
        if let problem = EventRules.requestIdProblem(text) { throw APIError(.invalidParameter, problem) }
        return text
    }
}

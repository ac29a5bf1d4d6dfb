import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// `GET /v1/ads/{requestId}`: one ad's audit trail, and `GET /v1/loads/{loadId}`: one load's
/// (report scope).
struct AdAuditRoute: Sendable {
    let keys: APIKeys
    let audit: AdAudit

    func register(on router: Router<some RequestContext>) {
        router.get("/v1/ads/:requestId") { request, context in
            try await handleAd(request, context: context)
        }
        router.get("/v1/loads/:loadId") { request, context in
            try await handleLoad(request, context: context)
        }
    }

    func handleAd(_ request: Request, context: some RequestContext) async throws -> Response {
        let principal = try await keys.principal(for: request, requiring: .report)
        let requestId = try Self.identifier("requestId", percentEncoded: context.parameters.get("requestId") ?? "")
        guard let (explanation, lag) = try await audit.explain(requestId: requestId, includeTest: try Self.includeTest(request),
                                                               networks: principal.networks) else {
            throw APIError(.notFound, "no stored event has the requestId '\(requestId)' (or the projector has not reached it yet)")
        }
        return Self.response(explanation.json, lag: lag, ivtRules: explanation.ivtRules)
    }

    func handleLoad(_ request: Request, context: some RequestContext) async throws -> Response {
        let principal = try await keys.principal(for: request, requiring: .report)
        let loadId = try Self.identifier("loadId", percentEncoded: context.parameters.get("loadId") ?? "")
        guard let (explanation, lag) = try await audit.explain(loadId: loadId, includeTest: try Self.includeTest(request),
                                                               networks: principal.networks) else {
            throw APIError(.notFound, "no stored event has the loadId '\(loadId)' (or the projector has not reached it yet)")
        }
        return Self.response(explanation.json, lag: lag, ivtRules: explanation.ivtRules)
    }

    private static func includeTest(_ request: Request) throws -> Bool {
        do {
            return try ReportQuery.includeTest(request.uri.queryParameters.get("includeTest"))
        } catch {
            throw APIError.from(error)
        }
    }

    private static func response(_ json: String, lag: ProjectionLag, ivtRules: Int) -> Response {
        var headers = ReportRoutes.privateFigures
        headers[.contentType] = "application/json"
        headers.describeProjections(lag: lag, ivtRules: ivtRules)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: json)))
    }

    /// The path segment, percent-decoded and checked by PROTOCOL.md 1's rule for `requestId`
    /// (which `loadId` shares).
    static func identifier(_ name: String, percentEncoded segment: String) throws -> String {
        guard let bytes = PercentDecoding.decode(segment, plusIsSpace: false, malformed: .refused) else {
            throw APIError(.invalidParameter, "\(name) is not percent-encoded correctly")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw APIError(.invalidParameter, "\(name) must be UTF-8 once percent-decoded")
        }
        if let problem = EventRules.identifierProblem(text, field: name) { throw APIError(.invalidParameter, problem) }
        return text
    }
}

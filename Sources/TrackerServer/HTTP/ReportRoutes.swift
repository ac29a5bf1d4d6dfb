import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// `GET /v1/reports/{summary|assets|sources|adchoices}` (SPEC section 6).
struct ReportRoutes: Sendable {
    let keys: APIKeys
    let reports: Reports

    func register(on router: Router<some RequestContext>) {
        router.get("/v1/reports/:report") { request, context in
            try await handle(request, context: context)
        }
    }

    func handle(_ request: Request, context: some RequestContext) async throws -> Response {
        _ = try await keys.principal(for: request, requiring: .report)
        let name = context.parameters.get("report") ?? ""
        let params = request.uri.queryParameters
        let query = try Self.query(report: name, parameter: { params.get($0) })
        let csv: Bool
        switch params.get("format")?.lowercased() {
        case nil, "": csv = (request.headers[.accept] ?? "").lowercased().contains("text/csv")
        case "csv": csv = true
        case "json": csv = false
        case let other?: throw APIError(.badRequest, "invalid_parameter", "format must be json or csv, got '\(other)'")
        }
        let result = try await reports.run(query)
        var headers: HTTPFields = [
            .contentType: csv ? "text/csv; charset=utf-8" : "application/json",
        ]
        headers[HTTPField.Name("X-Projection-Lag-Events")!] = String(result.lag.events)
        headers[HTTPField.Name("X-Projection-Lag-Seconds")!] = String(result.lag.seconds)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: csv ? result.csv : result.json)))
    }

    /// `includeTest`: absent, `false`/`0` or `true`/`1`.
    static func includeTest(_ value: String?) throws -> Bool {
        switch value?.lowercased() {
        case nil, "", "false", "0": false
        case "true", "1": true
        case let other?: throw APIError(.badRequest, "invalid_parameter", "includeTest must be true or false, got '\(other)'")
        }
    }

    /// Reads and checks the report parameters; every error names the parameter and the rule.
    static func query(report: String, parameter: (String) -> String?) throws -> ReportQuery {
        guard let kind = ReportKind(rawValue: report) else {
            throw APIError(.badRequest, "unknown_report", "unknown report '\(report)'; reports are summary, assets, sources and adchoices")
        }
        func day(_ name: String) throws -> Day {
            guard let text = parameter(name), !text.isEmpty else {
                throw APIError(.badRequest, "invalid_parameter", "\(name) is required: a UTC day as YYYY-MM-DD")
            }
            guard let day = Day(iso: text) else {
                throw APIError(.badRequest, "invalid_parameter", "\(name) must be a UTC day as YYYY-MM-DD, got '\(text)'")
            }
            return day
        }
        let includeTest = try includeTest(parameter("includeTest"))
        do {
            return try ReportQuery(kind: kind, from: try day("from"), to: try day("to"),
                                   adUnit: parameter("adUnit").flatMap { $0.isEmpty ? nil : $0 },
                                   formatId: parameter("formatId").flatMap { $0.isEmpty ? nil : $0 },
                                   includeTest: includeTest)
        } catch let error as ReportQueryError {
            throw APIError(.badRequest, "invalid_parameter", error.description)
        }
    }
}

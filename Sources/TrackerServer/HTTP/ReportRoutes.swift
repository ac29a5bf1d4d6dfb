import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// `GET /v1/reports/{summary|assets|sources|adchoices}` (docs/PROTOCOL.md, "Reports"): in any
/// time zone (`tz`), by day or by hour (`granularity`).
struct ReportRoutes: Sendable {
    let keys: APIKeys
    let reports: Reports
    /// `GET /v1/reports/reconciliation`, which reads an import beside the projections.
    let reconciliation: ReconciliationRoutes

    func register(on router: Router<some RequestContext>) {
        router.get("/v1/reports/:report") { request, context in
            try await handle(request, context: context)
        }
    }

    func handle(_ request: Request, context: some RequestContext) async throws -> Response {
        let principal = try await keys.principal(for: request, requiring: .report)
        let name = context.parameters.get("report") ?? ""
        if let problem = ReportQuery.unreadableParameter(rawQuery: request.uri.query ?? "") { throw APIError.from(problem) }
        let params = request.uri.queryParameters
        let csv: Bool
        switch params.get("format")?.lowercased() {
        case nil, "": csv = (request.headers[.accept] ?? "").lowercased().contains("text/csv")
        case "csv": csv = true
        case "json": csv = false
        case let other?: throw APIError(.invalidParameter, "format must be json or csv, got '\(other)'")
        }
        if name == "reconciliation" { return try await reconciliation.report(request, csv: csv, networks: principal.networks) }
        let query: ReportQuery
        do {
            query = try ReportQuery.parse(report: name, parameter: { params.get($0) })
        } catch {
            throw APIError.from(error)
        }
        let result: ReportResult
        do {
            result = try await reports.run(query, networks: principal.networks)
        } catch let error as ReportQueryError {
            throw APIError.from(error)
        } catch let error as ReportError {
            throw APIError.from(error)
        }
        var headers = Self.privateFigures
        headers[.contentType] = csv ? "text/csv; charset=utf-8" : "application/json"
        headers[HTTPField.Name("X-Projection-Lag-Events")!] = String(result.lag.events)
        headers[HTTPField.Name("X-Projection-Lag-Seconds")!] = String(result.lag.seconds)
        headers[HTTPField.Name("X-IVT-Rules")!] = String(result.ivtRules)
        let body = csv ? Self.body(bound: result.csvByteBound, result.writeCSV, else: { result.csvBytes })
            : Self.body(bound: result.jsonByteBound, result.writeJSON, else: { result.jsonBytes })
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    /// A report's body written straight into the response's buffer (an hourly report's is a
    /// megabyte, and writing it elsewhere first costs a copy of it), or, past what a buffer can
    /// be sized to at once, written as bytes of its own size first.
    static func body(bound: Int, _ write: (UnsafeMutableRawBufferPointer) -> Int, else bytes: () -> [UInt8]) -> ByteBuffer {
        guard bound <= Int(UInt32.max) else { return ByteBuffer(bytes: bytes()) }
        var buffer = ByteBufferAllocator().buffer(capacity: bound)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { write($0) }
        return buffer
    }

    /// Reports and audit trails are private figures: no shared or browser cache keeps them, and
    /// a browser never guesses another type (a CSV cell or a request id is not HTML).
    static let privateFigures: HTTPFields = [
        .cacheControl: "no-store",
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
    ]
}

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
    /// `TRACKER_DEFAULT_TZ`: the zone of a report asked without `tz` (`nil`: UTC).
    var defaultTimeZone: String? = nil

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
        let totals = try Self.totals(params.get("totals"), csv: csv, report: name)
        if name == "reconciliation" { return try await reconciliation.report(request, csv: csv, networks: principal.networks) }
        let asked = params.get("tz").flatMap { $0.isEmpty ? nil : $0 }
        let query: ReportQuery
        do {
            query = try ReportQuery.parse(report: name, parameter: { $0 == "tz" ? asked ?? defaultTimeZone : params.get($0) })
        } catch {
            throw APIError.from(error)
        }
        let result: ReportResult
        do {
            result = try await reports.run(query, networks: principal.networks)
        } catch ReportQueryError.unknownTimeZone(let zone) where asked == nil {
            throw APIError(.invalidParameter,
                           "no tz was given and the deployment's default zone, TRACKER_DEFAULT_TZ='\(zone)', is not one the database knows: "
                               + "name a zone with tz, and tell the operator")
        } catch let error as ReportQueryError {
            throw APIError.from(error)
        } catch let error as ReportError {
            throw APIError.from(error)
        }
        var headers = Self.privateFigures
        headers[.contentType] = csv ? "text/csv; charset=utf-8" : "application/json"
        if csv {
            headers[.contentDisposition] = Self.attachment(report: name, from: result.query.from, to: result.query.to,
                                                           zone: result.query.timeZone, hourly: result.query.granularity == .hour)
        }
        headers.describeProjections(lag: result.lag, ivtRules: result.ivtRules)
        let body = csv ? Self.body(bound: result.csvByteBound, { result.writeCSV(into: $0, totals: totals) }, else: { result.csvBytes(totals: totals) })
            : Self.body(bound: result.jsonByteBound, result.writeJSON, else: { result.jsonBytes })
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
    }

    /// `totals`: absent, `false`/`0` or `true`/`1`; a CSV of the projections' reports only (a JSON
    /// client adds up the rows it has; the reconciliation's rows are days of an import).
    static func totals(_ value: String?, csv: Bool, report: String) throws -> Bool {
        switch value?.lowercased() {
        case nil, "", "false", "0": return false
        case "true", "1":
            guard csv else {
                throw APIError(.invalidParameter, "totals=true adds a Total line to CSV only: ask format=csv (or Accept: text/csv), or sum the JSON rows")
            }
            guard report != "reconciliation" else {
                throw APIError(.invalidParameter, "totals is not available for the reconciliation report: its rows compare one day and ad unit each")
            }
            return true
        case let other?: throw APIError(.invalidParameter, "totals must be true or false, got '\(other)'")
        }
    }

    /// `attachment; filename="tracker-summary-2026-11-01-2026-11-07-America_New_York.csv"`: the
    /// name the dashboard gives the same download (`-hourly` by hour), so a CSV says its
    /// report, range and zone wherever it was saved from. A zone's `/` and anything else
    /// outside letters, digits, `_`, `+` and `-` become `_`: the name is a quoted string any
    /// client can take as it is.
    static func attachment(report: String, from: Day, to: Day, zone: String, hourly: Bool = false) -> String {
        var safeZone = "", replacing = false
        for scalar in zone.unicodeScalars {
            if scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "_+-".unicodeScalars.contains(scalar)) {
                safeZone.unicodeScalars.append(scalar)
                replacing = false
            } else if !replacing {
                safeZone += "_"
                replacing = true
            }
        }
        let name = ["tracker", report, from.description, to.description, safeZone].joined(separator: "-") + (hourly ? "-hourly" : "")
        return "attachment; filename=\"\(name).csv\""
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

extension HTTPFields {
    static let projectionLagEvents = HTTPField.Name("X-Projection-Lag-Events")!
    static let projectionLagSeconds = HTTPField.Name("X-Projection-Lag-Seconds")!
    static let ivtRules = HTTPField.Name("X-IVT-Rules")!

    /// What every answer read from the projections says of them (PROTOCOL.md 6 and 8): how far
    /// behind the log they are, and the invalid-traffic rule set their labels follow.
    mutating func describeProjections(lag: ProjectionLag, ivtRules: Int) {
        self[Self.projectionLagEvents] = String(lag.events)
        self[Self.projectionLagSeconds] = String(lag.seconds)
        self[Self.ivtRules] = String(ivtRules)
    }
}

import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Tracker

/// `POST /v1/reconciliations?tz=ZONE` (an Ad Manager report export, CSV), `GET
/// /v1/reconciliations` (the imports, newest first), `GET /v1/reconciliations/{id}` (one), and
/// `GET /v1/reports/reconciliation` (the report, through `ReportRoutes`). Report scope.
struct ReconciliationRoutes: Sendable {
    let keys: APIKeys
    let reconciliations: Reconciliations
    let reports: Reports

    func register(on router: Router<some RequestContext>) {
        router.post("/v1/reconciliations") { request, context in
            try await importReport(request, context: context)
        }
        router.get("/v1/reconciliations") { request, _ in
            let principal = try await keys.principal(for: request, requiring: .report)
            let imports = try await reconciliations.list(visibleTo: principal.networks)
            return Self.json("{\"imports\":[" + imports.map(\.json).joined(separator: ",") + "]}")
        }
        router.get("/v1/reconciliations/:id") { request, context in
            let principal = try await keys.principal(for: request, requiring: .report)
            let id = context.parameters.get("id") ?? ""
            guard id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }),
                  let found = try await reconciliations.load(id: id, visibleTo: principal.networks) else {
                throw APIError.from(ReconciliationError.noSuchImport(id))
            }
            return Self.json(found.json)
        }
    }

    func importReport(_ request: Request, context: some RequestContext) async throws -> Response {
        let principal = try await keys.principal(for: request, requiring: .report)
        guard let contentType = request.headers[.contentType], Self.isCSV(contentType) else {
            throw APIError(.unsupportedMediaType, "send the Ad Manager report export with 'Content-Type: text/csv'")
        }
        let limit = Reconciliations.maxBytes
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw Self.tooLarge
        }
        guard let name = request.uri.queryParameters.get("tz"), !name.isEmpty else {
            throw APIError(.invalidParameter, "tz is required: the IANA time zone of the report's dates (Ad Manager's network time zone), e.g. America/New_York")
        }
        let zone: String
        do {
            zone = try await reports.timeZone(name)
        } catch let error as ReportQueryError {
            throw APIError.from(error)
        }
        var body: [UInt8] = []
        for try await chunk in request.body {
            guard body.count + chunk.readableBytes <= limit else { throw Self.tooLarge }
            body.append(contentsOf: chunk.readableBytesView)
        }
        do {
            let imported = try await reconciliations.importReport(body, timeZone: zone, importedBy: principal.name,
                                                                  networks: principal.networks)
            if !imported.existing {
                do {
                    try await reconciliations.checkTolerance(of: imported, reports: reports)
                } catch {
                    context.logger.warning("import stored; comparing it with the tracker for tracker_reconciliation_imports_total failed",
                                           metadata: ["tracker.import": .string(imported.id), "tracker.error": "\(String(reflecting: error))"])
                }
            }
            return Self.json(imported.json)
        } catch let error as ReconciliationError {
            throw APIError.from(error)
        }
    }

    /// `GET /v1/reports/reconciliation?import=ID&threshold=0.10&from=…&to=…` as JSON or CSV.
    func report(_ request: Request, csv: Bool, networks: NetworkScope?) async throws -> Response {
        let params = request.uri.queryParameters
        let query: ReconciliationQuery
        do {
            query = try ReconciliationQuery.parse(parameter: { params.get($0) })
        } catch {
            throw APIError.from(error)
        }
        let result: ReconciliationResult
        do {
            result = try await reconciliations.report(query, reports: reports, networks: networks)
        } catch let error as ReconciliationError {
            throw APIError.from(error)
        } catch let error as ReportError {
            throw APIError.from(error)
        }
        var headers = ReportRoutes.privateFigures
        headers[.contentType] = csv ? "text/csv; charset=utf-8" : "application/json"
        if csv {
            headers[.contentDisposition] = ReportRoutes.attachment(report: "reconciliation", from: result.from, to: result.to, zone: result.imported.tz)
        }
        headers.describeProjections(lag: result.lag, ivtRules: result.ivtRules)
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: csv ? result.csv : result.json)))
    }

    static let tooLarge = APIError(.payloadTooLarge,
                                   "the file is over \(Reconciliations.maxBytes / 1024 / 1024) MiB; export fewer days or ad units per file")

    static func json(_ body: String) -> Response {
        var headers = ReportRoutes.privateFigures
        headers[.contentType] = "application/json"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// `text/csv` (Ad Manager's), and the types spreadsheets and `curl --data-binary` send for it.
    static func isCSV(_ contentType: String) -> Bool {
        let mediaType = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: " \t").lowercased() } ?? ""
        return ["text/csv", "application/csv", "text/plain", "application/vnd.ms-excel"].contains(mediaType)
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var s = self[...]
        while let f = s.first, set.contains(f) { s = s.dropFirst() }
        while let l = s.last, set.contains(l) { s = s.dropLast() }
        return String(s)
    }
}

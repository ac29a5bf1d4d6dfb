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
        if let problem = Self.unreadableParameter(rawQuery: request.uri.query ?? "") { throw problem }
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
            // Reports are private figures: no shared or browser cache keeps them, and a browser
            // never guesses another type (a CSV cell is not HTML).
            .cacheControl: "no-store",
            HTTPField.Name("X-Content-Type-Options")!: "nosniff",
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

    /// A `400` naming the first parameter whose percent-decoded value is not UTF-8 text or holds
    /// NUL: decoded leniently, `%00` cut the value short (`/1/a%00x` answered for `/1/a`) and
    /// `%FF` matched nothing; either way the answer was for another filter than the one sent.
    static func unreadableParameter(rawQuery: String) -> APIError? {
        for pair in rawQuery.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(decoding: percentDecoded(parts[0]), as: UTF8.self)
            for part in parts {
                let bytes = percentDecoded(part)
                if bytes.contains(0) {
                    return APIError(.badRequest, "invalid_parameter", "\(name) must not contain the character U+0000 (%00)")
                }
                if String(validating: bytes, as: UTF8.self) == nil {
                    return APIError(.badRequest, "invalid_parameter", "\(name) must be UTF-8 text once percent-decoded")
                }
            }
        }
        return nil
    }

    /// The bytes of a query component: `%XX` decoded, `+` as a space (form encoding).
    private static func percentDecoded(_ text: Substring) -> [UInt8] {
        var out: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.popFirst() {
            if b == UInt8(ascii: "%"), utf8.count >= 2, let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                out.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                out.append(b == UInt8(ascii: "+") ? UInt8(ascii: " ") : b)
            }
        }
        return out
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

import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Tracker

/// The API's stable error codes (`docs/openapi.yaml` lists which answer carries which), each
/// with the one status it is answered with: the one place where a code meets HTTP.
package enum ErrorCode: String, Sendable {
    case badRequest = "bad_request"
    case invalidJSON = "invalid_json"
    case invalidGzip = "invalid_gzip"
    case invalidBody = "invalid_body"
    case invalidParameter = "invalid_parameter"
    case unknownReport = "unknown_report"
    case rebuildRequired = "rebuild_required"
    case invalidImport = "invalid_import"
    case invalidBeacon = "invalid_beacon"
    case invalidBeaconRequest = "invalid_beacon_request"
    case unauthorized
    case forbidden
    case notFound = "not_found"
    case chartLibraryMissing = "chart_library_missing"
    case methodNotAllowed = "method_not_allowed"
    case requestTimeout = "request_timeout"
    case payloadTooLarge = "payload_too_large"
    case unsupportedMediaType = "unsupported_media_type"
    case rateLimited = "rate_limited"
    case `internal`
    case overloaded
    case databaseUnavailable = "database_unavailable"
    case shuttingDown = "shutting_down"
    case tooManyConnections = "too_many_connections"
    case beaconsNotConfigured = "beacons_not_configured"
    case unavailable

    var status: HTTPResponse.Status {
        switch self {
        case .badRequest, .invalidJSON, .invalidGzip, .invalidBody, .invalidParameter, .unknownReport, .invalidBeacon, .invalidBeaconRequest,
             .invalidImport: .badRequest
        case .rebuildRequired: .conflict
        case .unauthorized: .unauthorized
        case .forbidden: .forbidden
        case .notFound, .chartLibraryMissing: .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .requestTimeout: .requestTimeout
        case .payloadTooLarge: .contentTooLarge
        case .unsupportedMediaType: .unsupportedMediaType
        case .rateLimited: .tooManyRequests
        case .internal: .internalServerError
        case .overloaded, .databaseUnavailable, .shuttingDown, .tooManyConnections, .beaconsNotConfigured, .unavailable: .serviceUnavailable
        }
    }
}

/// An error a client can act on: a status, a stable code and a message saying what to fix.
///
/// Every error body of the API is `{"error": "<code>", "message": "<what to fix>"}`.
package struct APIError: Error, HTTPResponseError {
    package var status: HTTPResponse.Status
    var code: ErrorCode
    package var message: String
    var retryAfterSeconds: Int?
    /// Further headers of the answer (`Allow` on a `405`).
    var headers: HTTPFields

    package init(_ code: ErrorCode, _ message: String, retryAfterSeconds: Int? = nil, headers: HTTPFields = [:]) {
        self.init(status: code.status, code: code, message: message, retryAfterSeconds: retryAfterSeconds, headers: headers)
    }

    /// For a status the router chose (its own `404`, `405`, …), which may not be `code`'s.
    init(status: HTTPResponse.Status, code: ErrorCode, message: String, retryAfterSeconds: Int? = nil, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
        self.headers = headers
    }

    /// `{"error": "<code>", "message": "<what to fix>"}`.
    package var body: String {
        var body = "{\"error\":"
        JSONText.appendQuoted(code.rawValue, to: &body)
        body += ",\"message\":"
        JSONText.appendQuoted(message, to: &body)
        return body + "}"
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        response()
    }

    /// The answer: the error's status, its body, `Retry-After` and its headers, plus `extra`.
    func response(adding extra: HTTPFields = [:]) -> Response {
        var headers = extra
        headers.append(contentsOf: self.headers)
        headers[.contentType] = "application/json"
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// The one place where domain errors become HTTP statuses.
extension APIError {
    static func from(_ error: BatchError) -> APIError {
        switch error {
        case .malformedJSON: APIError(.invalidJSON, error.message)
        case .notAnObject, .missingEvents, .eventsNotAnArray, .sentAtNotATime, .sentAtNotAString: APIError(.invalidBody, error.message)
        case .bodyTooLarge, .tooManyEvents, .eventTooLarge: APIError(.payloadTooLarge, error.message)
        }
    }

    static func from(_ error: ReportQueryError) -> APIError {
        switch error {
        case .unknownReport: APIError(.unknownReport, error.description)
        case .invalidParameter, .fromAfterTo, .rangeTooLong, .unknownTimeZone: APIError(.invalidParameter, error.description)
        }
    }

    static func from(_ error: ReportError) -> APIError {
        switch error {
        case .quarterHoursMissing: APIError(.rebuildRequired, error.description)
        case .outsideNetworks: APIError(.forbidden, error.description)
        }
    }

    static func from(_ error: ReconciliationError) -> APIError {
        switch error {
        case .unreadable: APIError(.invalidImport, error.description)
        case .noSuchImport: APIError(.notFound, error.description)
        case .invalidParameter: APIError(.invalidParameter, error.description)
        case .outsideNetworks: APIError(.invalidImport, error.description)
        }
    }

    static func from(_ error: AppendError) -> APIError {
        switch error {
        case .overloaded:
            APIError(.overloaded, "the tracker is overloaded; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 1)
        case .databaseUnavailable:
            APIError(.databaseUnavailable, "the database is unavailable; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 2)
        case .shuttingDown:
            APIError(.shuttingDown, "this tracker instance is shutting down; nothing of this batch was stored, retry", retryAfterSeconds: 1)
        case .failed:
            APIError(.internal, "the batch could not be stored; nothing of it was acknowledged")
        }
    }

    static func from(_ error: DatabaseError) -> APIError {
        if error.isTransient || error.code == .poolClosed {
            return APIError(.databaseUnavailable, "the database is unavailable; retry after the delay", retryAfterSeconds: 2)
        }
        return APIError(.internal, "internal error")
    }
}

/// Turns every error, including the router's own (404, 405), into the API's JSON error body.
struct ErrorBodyMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            throw APIError(status: error.status, code: Self.code(for: error.status), message: error.body ?? error.status.reasonPhrase)
        } catch let error as DatabaseError {
            context.logger.error("database error", metadata: ["tracker.error": "\(error.debugDescription)"])
            throw APIError.from(error)
        } catch {
            context.logger.error("unhandled error", metadata: ["tracker.error": "\(String(reflecting: error))"])
            throw APIError(.internal, "internal error")
        }
    }

    static func code(for status: HTTPResponse.Status) -> ErrorCode {
        switch status.code {
        case 400: .badRequest
        case 401: .unauthorized
        case 403: .forbidden
        case 404: .notFound
        case 405: .methodNotAllowed
        case 413: .payloadTooLarge
        case 415: .unsupportedMediaType
        case 429: .rateLimited
        case 503: .unavailable
        default: status.code >= 500 ? .internal : .badRequest
        }
    }
}

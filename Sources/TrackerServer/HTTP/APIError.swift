import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Tracker

/// An error a client can act on: a status, a stable code and a message saying what to fix.
///
/// Every error body of the API is `{"error": "<code>", "message": "<what to fix>"}`.
struct APIError: Error, HTTPResponseError {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    var retryAfterSeconds: Int?
    /// Further headers of the answer (`Allow` on a `405`).
    var headers: HTTPFields

    init(_ status: HTTPResponse.Status, _ code: String, _ message: String, retryAfterSeconds: Int? = nil, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
        self.headers = headers
    }

    /// `{"error": "<code>", "message": "<what to fix>"}`.
    var body: String {
        var body = "{\"error\":"
        JSONText.appendQuoted(code, to: &body)
        body += ",\"message\":"
        JSONText.appendQuoted(message, to: &body)
        return body + "}"
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers = self.headers
        headers[.contentType] = "application/json"
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// The one place where domain errors become HTTP statuses.
extension APIError {
    static func from(_ error: BatchError) -> APIError {
        switch error {
        case .malformedJSON: APIError(.badRequest, "invalid_json", error.message)
        case .invalidBody: APIError(.badRequest, "invalid_body", error.message)
        case .bodyTooLarge, .tooManyEvents, .eventTooLarge: APIError(.contentTooLarge, "payload_too_large", error.message)
        }
    }

    static func from(_ error: ReportQueryError) -> APIError {
        switch error {
        case .unknownReport: APIError(.badRequest, "unknown_report", error.description)
        case .invalidParameter, .fromAfterTo, .rangeTooLong: APIError(.badRequest, "invalid_parameter", error.description)
        }
    }

    static func from(_ error: AppendError) -> APIError {
        switch error {
        case .overloaded:
            APIError(.serviceUnavailable, "overloaded", "the tracker is overloaded; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 1)
        case .databaseUnavailable:
            APIError(.serviceUnavailable, "database_unavailable", "the database is unavailable; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 2)
        case .shuttingDown:
            APIError(.serviceUnavailable, "shutting_down", "this tracker instance is shutting down; nothing of this batch was stored, retry", retryAfterSeconds: 1)
        case .failed:
            APIError(.internalServerError, "internal", "the batch could not be stored; nothing of it was acknowledged")
        }
    }

    static func from(_ error: DatabaseError) -> APIError {
        if error.isTransient || error.code == .poolClosed {
            return APIError(.serviceUnavailable, "database_unavailable", "the database is unavailable; retry after the delay", retryAfterSeconds: 2)
        }
        return APIError(.internalServerError, "internal", "internal error")
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
            throw APIError(error.status, Self.code(for: error.status), error.body ?? error.status.reasonPhrase)
        } catch let error as DatabaseError {
            context.logger.error("database error", metadata: ["tracker.error": "\(error.debugDescription)"])
            throw APIError.from(error)
        } catch {
            context.logger.error("unhandled error", metadata: ["tracker.error": "\(String(reflecting: error))"])
            throw APIError(.internalServerError, "internal", "internal error")
        }
    }

    static func code(for status: HTTPResponse.Status) -> String {
        switch status.code {
        case 400: "bad_request"
        case 401: "unauthorized"
        case 403: "forbidden"
        case 404: "not_found"
        case 405: "method_not_allowed"
        case 413: "payload_too_large"
        case 415: "unsupported_media_type"
        case 429: "rate_limited"
        case 503: "unavailable"
        default: status.code >= 500 ? "internal" : "bad_request"
        }
    }
}

import HTTPTypes
import Hummingbird
import Logging
import Metrics
import Synchronization
import Tracker

/// Gives every request an id, counts it by route and status, and logs it at debug level.
///
/// The id is the client's `X-Request-Id` when it is sane (1 to 128 visible ASCII characters),
/// else the one Hummingbird generated. It is returned in the response's `X-Request-Id` and set
/// as `tracker.request_id` on the request's logger, so every line logged for the request
/// carries it. Errors are turned into their responses here so that they get the header too.
struct RequestObserver<Context: RequestContext>: RouterMiddleware {
    let metrics: HTTPMetrics

    static var requestIDField: HTTPField.Name { HTTPField.Name("X-Request-Id")! }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let id = request.headers[Self.requestIDField].flatMap(ClientRequestID.sane)
            ?? context.logger[metadataKey: "hb.request.id"]?.description ?? ""
        context.logger[metadataKey: "hb.request.id"] = nil
        context.logger[metadataKey: "tracker.request_id"] = .string(id)
        let started = ContinuousClock.now
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        }
        response.headers[Self.requestIDField] = id
        let route = context.endpointPath ?? "NotFound"
        metrics.count(route: route, status: response.status.code)
        if context.logger.logLevel <= .debug {
            context.logger.debug("request", metadata: [
                "http.method": .string(request.method.rawValue),
                "http.route": .string(route),
                "http.status": .stringConvertible(response.status.code),
                "http.duration_ms": .stringConvertible(Double((ContinuousClock.now - started).nanoseconds / 1000) / 1000),
            ])
        }
        return response
    }
}

/// The `X-Request-Id` a client or load balancer sent.
enum ClientRequestID {
    static let maxLength = 128

    /// The client's id when it is 1 to 128 visible ASCII characters (no spaces, no control
    /// characters: it goes into log lines and a response header), else `nil`.
    static func sane(_ value: String) -> String? {
        let bytes = value.utf8
        guard !bytes.isEmpty, bytes.count <= maxLength, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return value
    }
}

/// `tracker_http_requests_total{route, status}`: one counter per route and status, made the
/// first time the pair is seen (a route is a template such as `/v1/reports/{report}`, so the
/// pairs are few).
final class HTTPMetrics: Sendable {
    private struct Key: Hashable {
        var route: String
        var status: Int
    }

    private let counters = Mutex<[Key: Counter]>([:])

    func count(route: String, status: Int) {
        let key = Key(route: route, status: status)
        let counter = counters.withLock { counters in
            if let c = counters[key] { return c }
            let c = Counter(label: "tracker_http_requests_total", dimensions: [("route", route), ("status", String(status))])
            counters[key] = c
            return c
        }
        counter.increment()
    }
}

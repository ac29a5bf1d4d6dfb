import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTPTypes
import Tracker

/// Answers given on the event loop, without waiting for the tasks that run the routes:
/// `GET /healthz`, so a liveness probe learns that the process is alive, not how busy it is;
/// the `503` to a batch that arrives while every admission place is taken; and the `429` to a
/// batch whose key (known from the key table in memory) has nothing left of its rate limit.
/// So a refusal is prompt and costs no decoding: it never waits behind the batches being
/// decoded, hundreds of them under overload (docs/RELIABILITY.md, overload).
/// A batch of a key the table knows that is let through is admitted here: its key, its head and
/// the events reserved for it (so the next head of that key already sees them taken) go to the
/// route in its request context (`AdmittedBatch`, through `FrontDoorDecisions`), and the route
/// decides none of it again.
///
/// The refused batch's body is read and dropped and the connection stays open: closing with
/// the body unread could reset the connection before the client read the answer. Nothing is
/// answered here while an earlier request of the connection is in progress, so answers keep
/// their order. The handler sits after Hummingbird's connection state handler, which then
/// counts these requests and answers like any other (its idle timeout would otherwise close
/// a connection that only ever got quick answers as idle).
final class QuickAnswers: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let rules: Rules
    /// Shared by every connection: made once, not per connection.
    private static let metrics = IngestMetrics()
    /// Counted with the routes' requests (`tracker_http_requests_total`), as `RequestObserver` does.
    private static let httpMetrics = HTTPMetrics()
    /// Requests passed on whose answers have not ended yet (more than one when pipelined).
    private var inFlight = 0
    /// The parts of a request answered here are dropped until its end.
    private var dropping = false
    /// That request asked for `Connection: close`: the connection closes at its end, once the
    /// answer is written (a close discards writes still pending).
    private var closeAfterDropping = false
    private var answerWritten: EventLoopFuture<Void>?

    /// What the refusals are decided by; shared by every connection.
    struct Rules: Sendable {
        var admission: Admission
        /// A batch of a key this table knows is admitted here; with `rateLimiter` too, one over
        /// its key's rate limit is refused.
        var keys: APIKeys?
        var rateLimiter: RateLimiter?
        /// The route's, by which a batch's head is read as the route would.
        var limits: IngestLimits
    }

    init(rules: Rules) {
        self.rules = rules
    }

    /// Puts `handler` after Hummingbird's connection state handler (or, without one, after `context`'s).
    static func place(_ handler: QuickAnswers, after context: ChannelHandlerContext) {
        let pipeline = context.pipeline.syncOperations
        if let state = try? pipeline.context(handlerType: HTTPConnectionStateHandler.self) {
            try? pipeline.addHandler(handler, position: .after(state.handler))
        } else {
            try? pipeline.addHandler(handler, position: .after(context.handler))
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if dropping {
            if case .end = part {
                dropping = false
                if closeAfterDropping {
                    if let answerWritten {
                        answerWritten.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
                    } else {
                        context.close(promise: nil)
                    }
                }
                answerWritten = nil
            }
            return
        }
        if case .head(let head) = part {
            switch inFlight == 0 ? decide(head) : nil {
            case .answer(let answer)?:
                dropping = true
                closeAfterDropping = head.headerFields[values: .connection].contains { value in
                    value.split(separator: ",").contains { String($0).trimmingSpaces.lowercased() == "close" }
                }
                let id = head.headerFields[RequestObserver<BasicRequestContext>.requestIDField].flatMap(ClientRequestID.sane)
                    ?? Self.newRequestID()
                Self.httpMetrics.count(route: answer.route, status: answer.status.code)
                write(context, answer, requestID: id, close: closeAfterDropping)
                return
            case .pass(let admitted)?:
                inFlight += 1
                FrontDoorDecisions.shared.pass(admitted, on: context.channel)
            case nil:
                inFlight += 1
                FrontDoorDecisions.shared.pass(nil, on: context.channel)
            }
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        forgetDecisions(context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        forgetDecisions(context)
    }

    /// Gives back what batches that never reached their route had reserved.
    private func forgetDecisions(_ context: ChannelHandlerContext) {
        for batch in FrontDoorDecisions.shared.close(context.channel) {
            if let reserved = batch.reserved { rules.rateLimiter?.refund(key: batch.principal.name, events: reserved) }
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { inFlight = max(0, inFlight - 1) }
        context.write(data, promise: promise)
    }

    /// What is done here with a request that has `head`: answered, admitted (`pass`), or (`nil`)
    /// left to the route. Runs for every request head: it allocates nothing for other requests;
    /// for a batch it costs finding its key (the header's key and its SHA-256).
    private func decide(_ head: HTTPRequest) -> Decision? {
        guard let path = head.path else { return nil }
        if head.method == .get, Self.path(path, is: "/healthz") {
            return .answer(Answer(route: "/healthz", status: .ok, body: HealthRoutes.alive, retryAfter: nil))
        }
        guard head.method == .post, Self.path(path, is: "/v1/events") else { return nil }
        if rules.admission.isFull {
            Self.metrics.refused(by: .concurrentBatches)
            return .answer(Answer(refusing: rules.admission.refusal))
        }
        // A key the table in memory does not know, and a batch the route will refuse before it
        // reserves (its media type, encoding or declared length), are left to the route, which
        // answers them with their errors.
        guard let principal = ingestPrincipal(head),
              case .success(let batch) = IngestRoute.batchHead(head.headerFields, limits: rules.limits) else { return nil }
        guard let rateLimiter = rules.rateLimiter else { return .pass(AdmittedBatch(principal: principal, head: batch, reserved: nil)) }
        if let wait = rateLimiter.reserve(key: principal.name, events: batch.events) {
            Self.metrics.refused(by: .rateLimit)
            return .answer(Answer(refusing: rateLimiter.refusal(key: principal.name, wait: wait)))
        }
        return .pass(AdmittedBatch(principal: principal, head: batch, reserved: batch.events))
    }

    /// The ingest key the request carries, when the key table in memory knows it.
    private func ingestPrincipal(_ head: HTTPRequest) -> Principal? {
        guard let keys = rules.keys, let header = head.headerFields[.authorization],
              let presented = APIKeys.bearerKey(header), !presented.isEmpty, presented.utf8.count <= 256,
              let principal = keys.cachedPrincipal(presented), principal.scope == .ingest else { return nil }
        return principal
    }

    /// Whether the request target `path` is `route`, with or without a query.
    static func path(_ path: String, is route: String) -> Bool {
        guard path.utf8.starts(with: route.utf8) else { return false }
        let rest = path.utf8.dropFirst(route.utf8.count)
        return rest.isEmpty || rest.first == UInt8(ascii: "?")
    }

    enum Decision {
        case answer(Answer)
        /// The batch admitted at its head.
        case pass(AdmittedBatch)
    }

    struct Answer {
        var route: String
        var status: HTTPResponse.Status
        var body: String
        var retryAfter: Int?
    }

    /// A request id for a request that brought no sane one (32 hex digits).
    static func newRequestID() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = String(generator.next() as UInt64, radix: 16) + String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: max(0, 32 - hex.count)) + hex
    }

    /// Writes a whole JSON answer; with `close`, the connection closes once the request has arrived whole.
    private func write(_ context: ChannelHandlerContext, _ answer: Answer, requestID: String, close: Bool) {
        var fields: HTTPFields = [RequestObserver<BasicRequestContext>.requestIDField: requestID]
        if close { fields[.connection] = "close" }
        if let retryAfter = answer.retryAfter { fields[.retryAfter] = String(retryAfter) }
        answerWritten = WholeAnswer.write(context, status: answer.status, body: answer.body, fields: fields)
    }
}

extension QuickAnswers.Answer {
    /// A batch's refusal.
    init(refusing error: APIError) {
        self.init(route: "/v1/events", status: error.status, body: error.body, retryAfter: error.retryAfterSeconds)
    }
}

@available(*, unavailable)
extension QuickAnswers: Sendable {}

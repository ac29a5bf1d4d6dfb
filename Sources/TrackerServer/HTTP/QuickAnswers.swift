import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTPTypes
import Tracker

/// Two answers given on the event loop, without waiting for the tasks that run the routes:
/// `GET /healthz`, so a liveness probe learns that the process is alive, not how busy it is;
/// and the `503` to a batch that arrives while every admission place is taken, so a refusal is
/// prompt and costs no decoding. Under ten times the sustainable load both used to wait
/// behind hundreds of batches being decoded (docs/RELIABILITY.md, overload).
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

    private let admission: Admission
    private let metrics = IngestMetrics()
    /// A request was passed on and its answer has not ended yet.
    private var inFlight = false
    /// The parts of a request answered here are dropped until its end.
    private var dropping = false
    /// That request asked for `Connection: close`: the connection closes at its end.
    private var closeAfterDropping = false

    init(admission: Admission) {
        self.admission = admission
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
                if closeAfterDropping { context.close(promise: nil) }
            }
            return
        }
        if case .head(let head) = part {
            if !inFlight, let answer = answer(to: head) {
                dropping = true
                closeAfterDropping = head.headerFields[values: .connection].contains { value in
                    value.split(separator: ",").contains { String($0).trimmingSpaces.lowercased() == "close" }
                }
                write(context, answer, close: closeAfterDropping)
                return
            }
            inFlight = true
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { inFlight = false }
        context.write(data, promise: promise)
    }

    /// The answer given here to a request with `head`, if any.
    private func answer(to head: HTTPRequest) -> (status: HTTPResponse.Status, body: String, retryAfter: Int?)? {
        let path = head.path.map { $0.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? $0 }
        if head.method == .get, path == "/healthz" {
            return (.ok, "{\"status\":\"ok\"}", nil)
        }
        if head.method == .post, path == "/v1/events", admission.isFull {
            metrics.refused(by: .concurrentBatches)
            let refusal = admission.refusal
            var body = "{\"error\":"
            JSONText.appendQuoted(refusal.code, to: &body)
            body += ",\"message\":"
            JSONText.appendQuoted(refusal.message, to: &body)
            return (refusal.status, body + "}", refusal.retryAfterSeconds)
        }
        return nil
    }

    /// Writes a whole JSON answer; with `close`, the connection closes once the request has arrived whole.
    private func write(_ context: ChannelHandlerContext, _ answer: (status: HTTPResponse.Status, body: String, retryAfter: Int?),
                       close: Bool) {
        let body = ByteBuffer(string: answer.body)
        var fields: HTTPFields = [.contentType: "application/json", .contentLength: String(body.readableBytes)]
        if close { fields[.connection] = "close" }
        if let retryAfter = answer.retryAfter { fields[.retryAfter] = String(retryAfter) }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

@available(*, unavailable)
extension QuickAnswers: Sendable {}

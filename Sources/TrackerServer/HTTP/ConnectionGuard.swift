import HTTPTypes
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Synchronization
import Tracker

/// Open HTTP connections of this process, shared by every connection's guard.
final class ConnectionCounter: Sendable {
    /// Connections beyond this many are answered `503` and closed.
    let limit: Int
    private let open = Atomic<Int>(0)

    init(limit: Int) {
        self.limit = limit
    }

    /// Counts a new connection; false when it is over the limit (it is still counted until it closes).
    func opened() -> Bool {
        open.add(1, ordering: .relaxed).newValue <= limit
    }

    func closed() {
        open.subtract(1, ordering: .relaxed)
    }

    var current: Int { open.load(ordering: .relaxed) }
}

/// Guards one HTTP connection against clients that hold the server's resources.
///
/// - Over `ConnectionCounter.limit` open connections, the connection's first request is
///   answered `503` with `Retry-After` and the connection is closed: refused cleanly, instead
///   of the server running out of descriptors (the listener stops accepting well before that).
/// - A request must arrive whole within `requestTimeout` of its head: a client that stalls or
///   trickles its body is answered `408` (unless an answer is already on its way) and closed.
///   The header itself is bounded by the server's idle timeout, which no partial header resets.
/// - When it is added it puts `HTTP1Corners` before the HTTP/1 codec (HTTP/1.0 closes after
///   its answer; requests the parser cannot read get a JSON `400`), and at the first request
///   `QuickAnswers` at the end of the pipeline.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let counter: ConnectionCounter
    private let requestTimeout: TimeAmount
    private var counted = false
    private var refused = false
    private var deadline: Scheduled<Void>?
    /// Whether a response head went out for the request being read (then no 408 may follow).
    private var answering = false
    /// Given to `QuickAnswers`, which is put in place at the first request (`nil`: none).
    private var quickAnswers: QuickAnswers?

    init(counter: ConnectionCounter, requestTimeout: TimeAmount, quickAnswers: QuickAnswers.Rules? = nil) {
        self.counter = counter
        self.requestTimeout = requestTimeout
        self.quickAnswers = quickAnswers.map(QuickAnswers.init(rules:))
    }

    func handlerAdded(context: ChannelHandlerContext) {
        HTTP1Corners.insert(into: context)
        if context.channel.isActive { count(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        count(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
    }

    private func count(_ context: ChannelHandlerContext) {
        guard !counted else { return }
        counted = true
        refused = !counter.opened()
        if refused {
            // A refused connection that sends no request is not kept waiting for one.
            deadline = context.eventLoop.assumeIsolatedUnsafeUnchecked().scheduleTask(in: .seconds(5)) {
                context.close(promise: nil)
            }
        }
    }

    private func release() {
        deadline?.cancel()
        deadline = nil
        guard counted else { return }
        counted = false
        counter.closed()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let quickAnswers {
            self.quickAnswers = nil
            QuickAnswers.place(quickAnswers, after: context)
        }
        let part = unwrapInboundIn(data)
        if refused {
            if case .head = part {
                deadline?.cancel()
                deadline = nil
                respond(context, .tooManyConnections,
                        "the tracker has \(counter.limit) connections open; retry after the delay", retryAfter: 1)
            }
            return
        }
        switch part {
        case .head:
            answering = false
            deadline?.cancel()
            let loop = context.eventLoop.assumeIsolatedUnsafeUnchecked()
            deadline = loop.scheduleTask(in: requestTimeout) { [self] in
                deadline = nil
                if answering {
                    context.close(promise: nil)
                } else {
                    respond(context, .requestTimeout,
                            "the request did not arrive whole within \(requestTimeout.nanoseconds / 1_000_000_000) s; nothing of it was stored")
                }
            }
        case .body:
            break
        case .end:
            deadline?.cancel()
            deadline = nil
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .head = unwrapOutboundIn(data) { answering = true }
        context.write(data, promise: promise)
    }

    /// Writes a whole error response in the API's JSON shape and closes the connection.
    private func respond(_ context: ChannelHandlerContext, _ code: ErrorCode, _ message: String, retryAfter: Int? = nil) {
        var fields: HTTPFields = [.connection: "close"]
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        WholeAnswer.write(context, status: code.status, body: APIError(code, message).body, fields: fields)
            .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

@available(*, unavailable)
extension ConnectionGuard: Sendable {}

/// A whole JSON answer written by a channel handler, in front of the routes.
enum WholeAnswer {
    /// Writes and flushes head, body and end; the future is the end's write.
    @discardableResult
    static func write(_ context: ChannelHandlerContext, status: HTTPResponse.Status, body: String, fields: HTTPFields) -> EventLoopFuture<Void> {
        let bytes = ByteBuffer(string: body)
        var fields = fields
        fields[.contentType] = "application/json"
        fields[.contentLength] = String(bytes.readableBytes)
        context.write(NIOAny(HTTPResponsePart.head(HTTPResponse(status: status, headerFields: fields))), promise: nil)
        context.write(NIOAny(HTTPResponsePart.body(bytes)), promise: nil)
        return context.writeAndFlush(NIOAny(HTTPResponsePart.end(nil)))
    }
}

/// What HTTP/1 needs where the version and the parser's errors are still in sight: before
/// the codec that turns HTTP/1 into Hummingbird's requests (Hummingbird's configuration only
/// adds handlers after it, so `ConnectionGuard` puts this one in place).
///
/// - HTTP/1.0 closes the connection after each answer unless the request asked to keep it
///   (`Connection: keep-alive`). The codec drops the version and Hummingbird closes only on
///   `Connection: close`, so an HTTP/1.0 client (old proxies, `ab`, health checkers) waited on
///   an open connection for an end that never came: such a request is marked `close` here.
/// - A request the HTTP/1 parser cannot read (a request line or headers over the limits, bad
///   syntax) is answered `400` in the API's JSON error shape and the connection is closed;
///   Hummingbird's own answer had an empty body that no client could show a person. Only when
///   nothing else is under way on the connection: an error inside a body, or behind a request
///   not yet answered, goes on to Hummingbird as before, so the request it breaks fails (and
///   stores nothing) and an earlier request's answer is not preceded by this one.
final class HTTP1Corners: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// Requests whose head was read and whose answer has not ended yet.
    private var unanswered = 0
    /// Whether a request's body is still being read (between its head and its end).
    private var readingBody = false
    /// Whether this handler answered a parse error (the connection is closing).
    private var answeredError = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(var head):
            unanswered += 1
            readingBody = true
            if !head.isKeepAlive {
                head.headers.replaceOrAdd(name: "connection", value: "close")
                context.fireChannelRead(wrapInboundOut(.head(head)))
                return
            }
        case .body: break
        case .end: readingBody = false
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), unanswered > 0 { unanswered -= 1 }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // After its answer, the parser refuses whatever else arrives: the connection is closing.
        if answeredError { return }
        guard let parserError = error as? HTTPParserError, unanswered == 0, !readingBody else {
            context.fireErrorCaught(error)
            return
        }
        answeredError = true
        let bytes = ByteBuffer(string: APIError(.badRequest, "the request could not be read as HTTP/1.1 (\(parserError)): a request line or header over the server's limits, or broken syntax").body)
        let head = HTTPResponseHead(version: .http1_1, status: .badRequest, headers: [
            "content-type": "application/json", "content-length": String(bytes.readableBytes), "connection": "close",
        ])
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: nil)
        // The channel, not the context, in the callback: a channel may be used from any thread.
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    /// Puts one before the HTTP/1 codec of `context`'s pipeline, once.
    static func insert(into context: ChannelHandlerContext) {
        let pipeline = context.pipeline.syncOperations
        guard (try? pipeline.handler(type: HTTP1Corners.self)) == nil,
              let codec = try? pipeline.handler(type: HTTP1ToHTTPServerCodec.self) else { return }
        try? pipeline.addHandler(HTTP1Corners(), position: .before(codec))
    }
}

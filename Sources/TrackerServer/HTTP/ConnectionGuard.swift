import HTTPTypes
import NIOCore
import NIOHTTPTypes
import Synchronization

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

    init(counter: ConnectionCounter, requestTimeout: TimeAmount) {
        self.counter = counter
        self.requestTimeout = requestTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
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
        let part = unwrapInboundIn(data)
        if refused {
            if case .head = part {
                deadline?.cancel()
                deadline = nil
                respond(context, .serviceUnavailable, "too_many_connections",
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
                    respond(context, .requestTimeout, "request_timeout",
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
    private func respond(_ context: ChannelHandlerContext, _ status: HTTPResponse.Status, _ code: String,
                         _ message: String, retryAfter: Int? = nil) {
        let body = ByteBuffer(string: "{\"error\":\"\(code)\",\"message\":\"\(message)\"}")
        var fields: HTTPFields = [.contentType: "application/json", .connection: "close",
                                  .contentLength: String(body.readableBytes)]
        if let retryAfter { fields[.retryAfter] = String(retryAfter) }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

@available(*, unavailable)
extension ConnectionGuard: Sendable {}

// `make bench-ingest`, (f): the HTTP floor of SwiftNIO on this machine. A bare HTTP/1.1 server
// (NIOHTTP1's standard pipeline and one handler, no Hummingbird, no middleware, no database)
// that reads and drops each request's body and answers 200 with the receipt of one accepted
// event, keeping the connection open. What the tracker does beyond this is what it adds.
//
// Usage: TrackerHTTPFloor PORT (on 127.0.0.1; one event loop per core, as `tracker serve`)
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOHTTP1
import NIOPosix

final class ReceiptHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private static let body = ByteBuffer(string: #"{"accepted":1,"duplicates":0,"rejected":[]}"#)
    private static let headers: HTTPHeaders = [
        "Content-Type": "application/json", "Content-Length": String(body.readableBytes),
    ]
    private var keepAlive = true

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): keepAlive = head.isKeepAlive
        case .body: break
        case .end:
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: Self.headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(Self.body))), promise: nil)
            let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
            if !keepAlive { written.assumeIsolated().whenComplete { _ in context.close(promise: nil) } }
        }
    }
}

@available(*, unavailable)
extension ReceiptHandler: Sendable {}

guard CommandLine.arguments.count == 2, let port = Int(CommandLine.arguments[1]), (1...65535).contains(port) else {
    print("usage: TrackerHTTPFloor PORT (1 to 65535)")
    exit(2)
}
let server = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
    .serverChannelOption(.backlog, value: 256)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
            try channel.pipeline.syncOperations.addHandler(ReceiptHandler())
        }
    }
    .bind(host: "127.0.0.1", port: port).wait()
print("listening on 127.0.0.1:\(port)")
try server.closeFuture.wait()

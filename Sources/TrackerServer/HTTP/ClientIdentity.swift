import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// Who sent a request, as the log records it for its events (the invalid-traffic rules read it):
/// the `User-Agent` header and the peer's address, or the client a trusted proxy forwarded for.
struct ClientIdentity: Sendable {
    /// Peers whose `X-Forwarded-For` is believed (`TRACKER_TRUSTED_PROXIES`); empty: none.
    var trustedProxies: IPRangeSet
    /// Store the /24 (IPv4) or /48 (IPv6) of every address (`TRACKER_IP_STORAGE=truncated`).
    var truncatesAddresses: Bool

    static let forwardedFor = HTTPField.Name("X-Forwarded-For")!

    /// The request's client. A request without `User-Agent` has the empty one; a peer that is
    /// not an IP socket (none in tests that run the router alone) has no address.
    func client(of request: Request, context: some RequestContext) -> EventClient {
        client(headers: request.headers, peer: (context as? any RemoteAddressRequestContext)?.remoteAddress)
    }

    /// The client of a request with `headers` from `peer`.
    func client(headers: HTTPFields, peer: SocketAddress?) -> EventClient {
        let agent = headers[values: .userAgent].first ?? ""
        var address = peer?.ipAddress.flatMap { IPAddress($0) }
        if let peer = address {
            let forwarded = headers[values: Self.forwardedFor]
            address = ForwardedFor.client(peer: peer, header: forwarded.isEmpty ? nil : forwarded.joined(separator: ","),
                                          trustedProxies: trustedProxies)
        }
        return EventClient(userAgent: agent, ip: truncatesAddresses ? address?.truncated() : address)
    }
}

/// A request context that knows the peer's address (Hummingbird's `BasicRequestContext` does
/// not) and what the front door decided at a batch's head.
struct TrackerRequestContext: RequestContext, RemoteAddressRequestContext, AdmittedBatchRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    let admittedBatch: AdmittedBatch?

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        remoteAddress = source.channel.remoteAddress
        admittedBatch = FrontDoorDecisions.shared.take(for: source.channel)
    }
}

import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import NIOPosix
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
/// A small admitted batch (a declared length of at most `inlineBytes`, no `Expect`) is
/// carried out here too, from its body to its receipt: decoded on the event loop (a gzipped
/// one that inflates past `inlineInflatedBytes` on NIO's blocking pool), handed to
/// the log's group commit, and answered from the event loop once its commit is durable, with
/// the route's checks, counters, request log lines and answer. A single event so skips the hop
/// to a task and back and the router, which cost more than the rest of its request.
/// While its commit is awaited, what else arrives on the connection (pipelined requests,
/// events such as the input's end, errors such as a parse error) waits here, and past 64 KiB of it the connection stops reading,
/// so what follows is answered after it. Reads also wait while the connection takes no more
/// writes (a client that sends and never reads).
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
    /// The small batch being carried out here, from its head until its answer is written.
    private var inline: InlineBatch?
    /// What arrived while `inline` waited for its commit (parts, the input's end, errors),
    /// passed on in order once it is answered.
    private var held: [Held] = []
    /// What `held` is charged against `heldLimit`.
    private var heldBytes = 0
    /// A read asked for while reads wait (`holdsReads`), passed on once they no longer do.
    private var readHeld = false
    /// The connection went: an answer due is not written. Set when the handler is removed
    /// (Hummingbird's connection state handler, before this one, does not pass
    /// `channelInactive` on), so a closed channel is also told by `isActive`.
    private var gone = false
    /// A request answered here asked to close the connection: nothing after it is read.
    private var closing = false

    /// What the refusals are decided by; shared by every connection.
    struct Rules: Sendable {
        var admission: Admission
        /// A batch of a key this table knows is admitted here; with `rateLimiter` too, one over
        /// its key's rate limit is refused.
        var keys: APIKeys?
        var rateLimiter: RateLimiter?
        /// The route's, by which a batch's head is read as the route would.
        var limits: IngestLimits
        /// The ingest route, whose steps a small admitted batch takes here (`nil`: every
        /// batch goes to the route).
        var ingest: IngestRoute?
        /// The `Server` field of every answer, as Hummingbird writes it on the routes' answers.
        var serverName: String
        /// The server's logger: a batch carried out here logs the route's debug lines with it.
        var logger: Logger
    }

    /// Batches of a declared length up to this many bytes are carried out here (a single
    /// event is about 300 bytes; decoding 8 KiB takes tens of microseconds, so other
    /// connections of the event loop wait no longer than that).
    static let inlineBytes = 8 * 1024

    /// A gzipped batch carried out here is inflated on the event loop up to this many bytes
    /// (about a hundred events); one that inflates to more, up to the batch limit,
    /// is inflated and decoded on NIO's blocking pool, so no body holds the event loop longer.
    static let inlineInflatedBytes = 32 * 1024

    /// What may be held behind a batch awaiting its commit before the connection stops
    /// reading (`charge(of:)`). Reads go on below it: stopping and resuming them costs the
    /// event loop two `epoll_ctl` calls, on every request if it were done for every commit.
    static let heldLimit = 64 * 1024

    /// What a held part counts against `heldLimit`: a body its bytes, a head its fields' bytes
    /// and a fixed 256 for the parsed request, an end 64; so many small pipelined requests
    /// stop the reading as surely as one large body does.
    static func charge(of part: HTTPRequestPart) -> Int {
        switch part {
        case .body(let chunk): chunk.readableBytes
        case .head(let head):
            head.headerFields.reduce(256 + (head.path?.utf8.count ?? 0)) { $0 + $1.name.rawName.utf8.count + $1.value.utf8.count }
        case .end: 64
        }
    }

    /// Something that arrived while a batch awaited its commit.
    enum Held {
        case part(NIOAny)
        case event(Any)
        case error(any Error)
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
        if closing { return }
        if awaitingCommit {
            heldBytes += Self.charge(of: unwrapInboundIn(data))
            held.append(.part(data))
            return
        }
        let part = unwrapInboundIn(data)
        if inline != nil {
            read(part, context: context)
            return
        }
        if dropping {
            if case .end = part {
                dropping = false
                if closeAfterDropping {
                    closing = true
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
                closeAfterDropping = asksToClose(head)
                Self.httpMetrics.count(route: answer.route, status: answer.status.code)
                answerWritten = write(context, answer, requestID: requestID(head), close: closeAfterDropping)
                return
            case .pass(let admitted)? where rules.ingest != nil && Self.carriesOutHere(head, admitted):
                inline = InlineBatch(admitted: admitted, head: head, requestID: requestID(head), close: asksToClose(head))
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
        leave(context)
        context.fireChannelInactive()
    }

    /// The input's end (a client that half-closes after its request) waits behind a batch
    /// awaiting its commit: passed on at once, Hummingbird would close before the answer.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if awaitingCommit {
            held.append(.event(event))
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// An error behind a batch awaiting its commit (a pipelined request the parser cannot
    /// read) waits too, so the batch is answered before the error's answer.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if awaitingCommit {
            held.append(.error(error))
        } else {
            context.fireErrorCaught(error)
        }
    }

    /// Reads resume once the connection can take writes again.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if readHeld, !holdsReads(context) {
            readHeld = false
            context.read()
        }
        context.fireChannelWritabilityChanged()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        leave(context)
    }

    /// Whether a batch carried out here awaits its commit.
    private var awaitingCommit: Bool { inline?.awaitingCommit == true }

    /// Whether reads wait: a batch awaits its commit with `heldLimit` held behind it, or the
    /// connection takes no more writes (a client that sends and never reads its answers).
    private func holdsReads(_ context: ChannelHandlerContext) -> Bool {
        (awaitingCommit && heldBytes >= Self.heldLimit) || !context.channel.isWritable
    }

    func read(context: ChannelHandlerContext) {
        if holdsReads(context) {
            readHeld = true
        } else {
            context.read()
        }
    }

    /// Whether the connection is gone or closing: nothing more is answered or read.
    private func isOver(_ context: ChannelHandlerContext) -> Bool {
        gone || closing || !context.channel.isActive
    }

    /// The connection goes: what its requests reserved is given back, and an answer still due
    /// is not written (a batch awaiting its commit still settles when it comes).
    private func leave(_ context: ChannelHandlerContext) {
        gone = true
        held = []
        heldBytes = 0
        if let batch = inline, !batch.awaitingCommit {
            inline = nil
            release(batch)
            if let reserved = batch.admitted.reserved {
                rules.rateLimiter?.refund(key: batch.admitted.principal.name, events: reserved)
            }
        }
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
        /// Further fields of the answer.
        var fields: HTTPFields = [:]
    }

    /// The request id of the request with `head`: its own when sane, else a new one.
    private func requestID(_ head: HTTPRequest) -> String {
        head.headerFields[RequestObserver<BasicRequestContext>.requestIDField].flatMap(ClientRequestID.sane) ?? Self.newRequestID()
    }

    /// Whether the request with `head` asked for `Connection: close`.
    private func asksToClose(_ head: HTTPRequest) -> Bool {
        head.headerFields[values: .connection].contains { value in
            value.split(separator: ",").contains { String($0).trimmingSpaces.lowercased() == "close" }
        }
    }

    /// A request id for a request that brought no sane one: Hummingbird's, as the routes' requests
    /// get (a process-wide random prefix and a counter), so no request waits on a `getrandom` call.
    static func newRequestID() -> String {
        RequestID().description
    }

    /// Writes a whole JSON answer with the fields a route's answer has (`Date`, `Server`, the
    /// request id); with `close`, marked so (the caller closes the connection once the request
    /// has arrived whole and the answer is written).
    private func write(_ context: ChannelHandlerContext, _ answer: Answer, requestID: String, close: Bool) -> EventLoopFuture<Void> {
        var fields = answer.fields
        fields[RequestObserver<BasicRequestContext>.requestIDField] = requestID
        fields[.date] = HTTPDate.now()
        fields[.server] = rules.serverName
        if close { fields[.connection] = "close" }
        if let retryAfter = answer.retryAfter { fields[.retryAfter] = String(retryAfter) }
        return WholeAnswer.write(context, status: answer.status, body: answer.body, fields: fields)
    }
}

// MARK: - A small batch carried out on the event loop

extension QuickAnswers {
    /// A small admitted batch from its head to its answer.
    struct InlineBatch {
        var admitted: AdmittedBatch
        var head: HTTPRequest
        var requestID: String
        /// The request asked for `Connection: close`.
        var close: Bool
        var started = ContinuousClock.now
        var body = ByteBuffer()
        /// Bytes of `body` taken from the body budget.
        var budgeted = 0
        /// Why the batch is refused, once known while its body still arrives.
        var refusal: APIError?
        /// Handed to the log (or, to be decoded, to the blocking pool); what the connection
        /// sends next waits until it is answered.
        var awaitingCommit = false
    }

    /// Whether an admitted batch with `head` is carried out here: a declared length of at most
    /// `inlineBytes` and no `Expect`, whose answer is the route's to give.
    static func carriesOutHere(_ head: HTTPRequest, _ admitted: AdmittedBatch) -> Bool {
        guard head.headerFields[.expect] == nil,
              let length = head.headerFields[.contentLength].flatMap(Int.init) else { return false }
        return length <= inlineBytes
    }

    /// A part of the batch being read here.
    private func read(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        guard var batch = inline, let route = rules.ingest else { return }
        inline = nil  // `batch` is the only holder of its body while it grows
        switch part {
        case .head:
            break  // a head comes only after the end
        case .body(var chunk):
            if batch.refusal != nil {
                break
            } else if batch.body.readableBytes + chunk.readableBytes > batch.admitted.head.wireLimit {
                batch.refusal = IngestRoute.tooLarge(route.limits)
            } else if !route.bodyBudget.take(chunk.readableBytes) {
                batch.refusal = route.bodyBudgetRefusal()
            } else {
                batch.budgeted += chunk.readableBytes
                batch.body.writeBuffer(&chunk)
            }
        case .end:
            inline = batch
            carryOut(route, context: context)
            return
        }
        inline = batch
    }

    /// The route's steps for the batch whose body is in: a place, decoding, the budgets, the
    /// append; answered when the log replies. A gzipped body that inflates past
    /// `inlineInflatedBytes` is decoded on NIO's blocking pool, as the route decodes a large one.
    private func carryOut(_ route: IngestRoute, context: ChannelHandlerContext) {
        guard let batch = inline else { return }
        let principal = batch.admitted.principal
        let charge = batch.admitted.reserved.map { (key: principal.name, events: $0) }
        if let refusal = batch.refusal {
            return refuse(refusal, charge: charge, context: context)
        }
        guard route.admission.enter() else {
            route.metrics.refused(by: .concurrentBatches)
            return refuse(route.admission.refusal, charge: charge, context: context)
        }
        let receivedAt = Timestamp.now()
        // Read now: once the connection closes, its addresses are gone.
        let client = route.clients.client(headers: batch.head.headerFields, peer: context.channel.remoteAddress)
        let body = batch.body, gzip = batch.admitted.head.gzip
        if let decoded = route.decodedAtOnce(body, gzip: gzip, inflatingAtMost: Self.inlineInflatedBytes,
                                             receivedAt: receivedAt, key: principal) {
            return append(decoded, client: client, receivedAt: receivedAt, charge: charge, route: route, context: context)
        }
        // Off the event loop; what arrives meanwhile waits as it does for the commit.
        inline?.awaitingCommit = true
        let decodedThen = onEventLoop(context) { (self_, context, decoded: Result<DecodedBatch, APIError>) in
            self_.append(decoded, client: client, receivedAt: receivedAt, charge: charge, route: route, context: context)
        }
        NIOThreadPool.singleton.submit { state in
            decodedThen(state == .active ? route.decoded(body, gzip: gzip, receivedAt: receivedAt, key: principal)
                : .failure(APIError.from(AppendError.shuttingDown)))
        }
    }

    /// A callback for another thread that runs `body` with this handler and `context` on the
    /// context's event loop.
    private func onEventLoop<T: Sendable>(_ context: ChannelHandlerContext,
                                          _ body: @escaping (QuickAnswers, ChannelHandlerContext, T) -> Void) -> @Sendable (T) -> Void {
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context, body), eventLoop: loop)
        return { value in
            loop.execute {
                let (handler, context, body) = bound.value
                body(handler, context, value)
            }
        }
    }

    /// The decoded batch's budgets settled and its events handed to the log, or its error answered.
    private func append(_ decoded: Result<DecodedBatch, APIError>, client: EventClient, receivedAt: Timestamp,
                        charge: IngestRoute.Charge?, route: IngestRoute, context: ChannelHandlerContext) {
        guard let batch = inline else { return }
        let principal = batch.admitted.principal
        route.bodyBudget.release(batch.budgeted)
        inline?.budgeted = 0
        inline?.body = ByteBuffer()
        guard case .success(var decodedBatch) = decoded else {
            route.admission.leave()
            if case .failure(let error) = decoded { refuse(error, charge: charge, context: context) }
            return
        }
        var charge = charge
        let events = route.admit(&decodedBatch, key: principal.name, client: client, receivedAt: receivedAt, charge: &charge)
        inline?.awaitingCommit = true
        let settled = charge, stored = decodedBatch
        route.log.append(events, keyName: principal.name, then: onEventLoop(context) { self_, context, result in
            self_.committed(result, batch: stored, key: principal.name, charge: settled, route: route, context: context)
        })
    }

    /// The log's reply for the batch awaiting its commit.
    private func committed(_ result: Result<AppendOutcome, AppendError>, batch: DecodedBatch, key: String,
                           charge: IngestRoute.Charge?, route: IngestRoute, context: ChannelHandlerContext) {
        route.admission.leave()
        switch result {
        case .success(let outcome):
            let logger = inline.map(logger(for:)) ?? rules.logger
            let receipt = route.receipt(outcome, of: batch, key: key, logger: logger)
            finish(Answer(route: "/v1/events", status: .ok, body: receipt, retryAfter: nil), context: context)
        case .failure(let error):
            refuse(route.refusal(error), charge: charge, context: context)
        }
    }

    /// Answers the batch with `error`, giving back what `charge` reserved.
    private func refuse(_ error: APIError, charge: IngestRoute.Charge?, context: ChannelHandlerContext) {
        if let charge { rules.rateLimiter?.refund(key: charge.key, events: charge.events) }
        finish(Answer(refusing: error), context: context)
    }

    /// Counts and logs the batch's answer and writes it; then reads on: the parts that arrived
    /// meanwhile, and the read held back.
    private func finish(_ answer: Answer, context: ChannelHandlerContext) {
        guard let batch = inline else { return }
        inline = nil
        release(batch)
        Self.httpMetrics.count(route: answer.route, status: answer.status.code)
        let logger = logger(for: batch)
        if logger.logLevel <= .debug {
            logger.debug("request", metadata: [
                "http.method": "POST", "http.route": .string(answer.route),
                "http.status": .stringConvertible(answer.status.code),
                "http.duration_ms": .stringConvertible(Double((ContinuousClock.now - batch.started).nanoseconds / 1000) / 1000),
            ])
        }
        guard !isOver(context) else { return }
        let written = write(context, answer, requestID: batch.requestID, close: batch.close)
        if batch.close {
            closing = true
            held = []
            heldBytes = 0
            written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            return
        }
        let waiting = held
        held = []
        heldBytes = 0
        for item in waiting {
            // A request among them may have closed the connection (`Connection: close`):
            // nothing after it is read.
            if isOver(context) { break }
            switch item {
            case .part(let part): channelRead(context: context, data: part)
            case .event(let event): userInboundEventTriggered(context: context, event: event)
            case .error(let error): errorCaught(context: context, error: error)
            }
        }
        // Hummingbird's handler passes on what it read at the end of a read.
        if !waiting.isEmpty, !isOver(context) { context.fireChannelReadComplete() }
        if readHeld, !holdsReads(context) {
            readHeld = false
            context.read()
        }
    }

    /// Gives back the body bytes `batch` holds against the budget.
    private func release(_ batch: InlineBatch) {
        if batch.budgeted > 0 { rules.ingest?.bodyBudget.release(batch.budgeted) }
    }

    /// The server's logger with the request's id, as the routes' requests log (only when
    /// debug lines are written: the metadata costs an allocation).
    private func logger(for batch: InlineBatch) -> Logger {
        var logger = rules.logger
        if logger.logLevel <= .debug { logger[metadataKey: "tracker.request_id"] = .string(batch.requestID) }
        return logger
    }
}

extension QuickAnswers.Answer {
    /// A batch's refusal.
    init(refusing error: APIError) {
        self.init(route: "/v1/events", status: error.status, body: error.body, retryAfter: error.retryAfterSeconds, fields: error.headers)
    }
}

@available(*, unavailable)
extension QuickAnswers: Sendable {}

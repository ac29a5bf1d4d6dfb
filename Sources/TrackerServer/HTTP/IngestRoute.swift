import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Tracker

/// `POST /v1/events` (PROTOCOL.md sections 1 to 4).
package struct IngestRoute: Sendable {
    let keys: APIKeys
    let log: EventLog
    let decoder: BatchDecoder
    let rateLimiter: RateLimiter?
    /// Distinct ad units, formats, asset keys and adapters per key and day; `nil`: no limit.
    let dimensionBudget: DimensionBudget?
    /// Batches being decoded or written at once; more get `503` at once. A place is taken only
    /// once the body is in, so clients that send slowly or stall cannot hold the places.
    let admission: Admission
    /// Bytes of bodies still arriving (and, for a small batch on the event loop, until it is
    /// decoded), across all requests: a client holds only what it really sent, and beyond the
    /// budget new bytes get `503` (the connection guard's request deadline bounds how long any
    /// of it is held).
    let bodyBudget: BodyBudget
    let metrics: IngestMetrics
    /// Who sent each request, recorded with its events.
    let clients: ClientIdentity

    var limits: IngestLimits { decoder.limits }

    /// The events reserved against a key's rate limit for a batch, settled once it is decoded.
    typealias Charge = (key: String, events: Int)

    /// Bodies of at least this many bytes are inflated and decoded on NIO's blocking thread
    /// pool instead of the cooperative threads that run every request's task and the server's
    /// accept loop. Under ten times the sustainable load, hundreds of 250 KiB decodes on those
    /// two threads kept new connections waiting in the kernel's backlog (`/healthz` took 10 s),
    /// and a refusal waited behind them. Small batches stay where they are: a thread hop costs
    /// more than decoding a few events.
    static let offloadBytes = 16 * 1024

    func register(on router: Router<some RequestContext>) {
        router.post("/v1/events") { request, context in
            try await handle(request, context: context)
        }
    }

    func handle(_ request: Request, context: some RequestContext) async throws -> Response {
        // Key, head and the rate limit's reservation are decided once, before the body is read:
        // usually on the event loop by QuickAnswers (the admitted batch), else here. The charge
        // is settled once the batch is decoded, and given back if the batch is refused whole.
        let admitted = (context as? any AdmittedBatchRequestContext)?.admittedBatch
        var charge = admitted.flatMap { batch in batch.reserved.map { (key: batch.principal.name, events: $0) } }
        do {
            let (principal, head): (Principal, BatchHead)
            if let admitted {
                (principal, head) = (admitted.principal, admitted.head)
            } else {
                (principal, head) = try await admit(request, charge: &charge)
            }
            let body = try await readBody(request, upTo: head.wireLimit)
            return try await decodeAndAppend(body, gzip: head.gzip, key: principal, client: clients.client(of: request, context: context),
                                             charge: &charge, context: context)
        } catch {
            if let charge { rateLimiter?.refund(key: charge.key, events: charge.events) }
            throw error
        }
    }

    /// The decisions QuickAnswers did not make for `request`: its key, its head, and (with a
    /// rate limit) the events reserved for the key, in `charge`.
    private func admit(_ request: Request, charge: inout Charge?) async throws -> (Principal, BatchHead) {
        let principal = try await keys.principal(for: request, requiring: .ingest)
        let head = try Self.batchHead(request.headers, limits: limits).get()
        if let rateLimiter {
            if let wait = rateLimiter.reserve(key: principal.name, events: head.events) {
                metrics.refused(by: .rateLimit)
                throw rateLimiter.refusal(key: principal.name, wait: wait)
            }
            charge = (principal.name, head.events)
        }
        return (principal, head)
    }

    /// What a batch's request head tells of its body, checked before the body is read.
    struct BatchHead {
        var gzip: Bool
        /// The most bytes the body may have as sent: the batch limit, or twice it gzipped (a
        /// gzip body larger than that cannot be a valid batch: it would decompress past the
        /// limit or be incompressible noise; refusing it early bounds memory).
        var wireLimit: Int
        /// What the rate limit reserves for the batch (`estimatedEvents`).
        var events: Int
    }

    /// The batch head of a request with `fields`, or the refusal of its media type, encoding or
    /// declared length. The route refuses by it, and QuickAnswers reserves by it at the head.
    static func batchHead(_ fields: HTTPFields, limits: IngestLimits) -> Result<BatchHead, APIError> {
        guard let contentType = fields[.contentType], isJSON(contentType) else {
            return .failure(APIError(.unsupportedMediaType, "send the batch with 'Content-Type: application/json'"))
        }
        let gzip: Bool
        switch fields[.contentEncoding]?.lowercased().trimmingSpaces {
        case nil, "", "identity": gzip = false
        case "gzip", "x-gzip": gzip = true
        case let other?:
            return .failure(APIError(.unsupportedMediaType, "Content-Encoding '\(other)' is not supported; send identity or gzip"))
        }
        let wireLimit = gzip ? limits.maxBodyBytes * 2 : limits.maxBodyBytes
        let length = fields[.contentLength].flatMap(Int.init)
        if let length, length > wireLimit {
            return .failure(tooLarge(limits))
        }
        return .success(BatchHead(gzip: gzip, wireLimit: wireLimit, events: estimatedEvents(length: length, gzip: gzip, limits: limits)))
    }

    /// At least as many valid events as a body of `length` bytes can carry (the smallest valid
    /// event is about 140 bytes as JSON, and no fewer than 16 gzipped), at most a batch's limit;
    /// the limit when the length is not declared. Invalid events can be smaller: settling
    /// charges them too, as debt.
    static func estimatedEvents(length: Int?, gzip: Bool, limits: IngestLimits) -> Int {
        guard let length else { return limits.maxEventsPerBatch }
        return min(limits.maxEventsPerBatch, max(1, length / (gzip ? 16 : 128)))
    }

    /// Decodes and appends the batch; settles the rate limit's reservation in `charge` to the
    /// events the batch carried once it is decoded.
    private func decodeAndAppend(_ body: ByteBuffer, gzip: Bool, key principal: Principal, client: EventClient,
                                 charge: inout Charge?,
                                 context: some RequestContext) async throws -> Response {
        guard admission.enter() else {
            metrics.refused(by: .concurrentBatches)
            throw admission.refusal
        }
        defer { admission.leave() }
        let receivedAt = Timestamp.now()
        let work: @Sendable () -> Result<DecodedBatch, APIError> = { [self, body] in
            decoded(body, gzip: gzip, receivedAt: receivedAt, key: principal)
        }
        var batch = try (body.readableBytes >= Self.offloadBytes ? try await NIOThreadPool.singleton.runIfActive(work) : work()).get()
        let events = admit(&batch, key: principal.name, client: client, receivedAt: receivedAt, charge: &charge)
        let outcome: AppendOutcome
        do {
            outcome = try await log.append(events, keyName: principal.name)
        } catch {
            throw refusal(error)
        }
        return Response(status: .ok, headers: [.contentType: "application/json"],
                        body: .init(byteBuffer: ByteBuffer(string: receipt(outcome, of: batch, key: principal.name, logger: context.logger))))
    }

    /// The batch in `body` (inflated first when `gzip`), or the error to answer.
    func decoded(_ body: ByteBuffer, gzip: Bool, receivedAt: Timestamp, key principal: Principal) -> Result<DecodedBatch, APIError> {
        (gzip ? inflate(body) : .success(body)).flatMap {
            decode($0, receivedAt: receivedAt, serverKey: principal.server, networks: principal.networks)
        }
    }

    /// What follows a batch's decoding before its append: the dimension budget, the parse
    /// counters, and the rate limit's reservation in `charge` settled to the events carried.
    /// Returns the events to append, each with its client.
    func admit(_ batch: inout DecodedBatch, key: String, client: EventClient, receivedAt: Timestamp,
               charge: inout Charge?) -> [TrackingEvent] {
        dimensionBudget?.admit(&batch, key: key, receivedAt: receivedAt)
        let carried = batch.accepted.count + batch.rejected.count
        metrics.parsed(events: carried, rejected: batch.rejected)
        if let rateLimiter, let reserved = charge {
            rateLimiter.settle(key: reserved.key, reserved: reserved.events, actual: carried)
            charge?.events = carried
        }
        let truncates = clients.truncatesAddresses
        return batch.accepted.map { $0.event.sent(by: client, truncatingAddresses: truncates) }
    }

    /// The answer to an append the log refused or could not store, counted.
    func refusal(_ error: AppendError) -> APIError {
        if error == .overloaded { metrics.refused(by: .queue) }
        return APIError.from(error)
    }

    /// The receipt of `batch` once stored with `outcome`; counts the outcome and logs it.
    func receipt(_ outcome: AppendOutcome, of batch: DecodedBatch, key: String, logger: Logger) -> String {
        metrics.stored(outcome)
        logger.debug("batch stored", metadata: [
            "tracker.key_name": .string(key), "tracker.accepted": .stringConvertible(outcome.stored),
            "tracker.duplicates": .stringConvertible(outcome.duplicates), "tracker.rejected": .stringConvertible(batch.rejected.count + outcome.refused.count),
        ])
        var rejected = batch.rejected
        if !outcome.refused.isEmpty {
            let refusals = outcome.refused.map { refusal in
                let (index, event) = batch.accepted[refusal.index]
                return Rejection(index: index, id: event.id.text, error: refusal.reason, reason: "storage")
            }
            metrics.count(refusals)
            rejected.append(contentsOf: refusals)
            rejected.sort { $0.index < $1.index }
        }
        return Self.receiptBody(outcome: outcome, rejected: rejected)
    }

    /// The batch in `body` if it can be decoded at once: gzipped, only when it inflates to at
    /// most `inflatedLimit` bytes, else `nil` (then `decoded`, with the batch's own limit, off
    /// the event loop). The answer is the one `decoded` gives.
    func decodedAtOnce(_ body: ByteBuffer, gzip: Bool, inflatingAtMost inflatedLimit: Int, receivedAt: Timestamp,
                       key principal: Principal) -> Result<DecodedBatch, APIError>? {
        guard gzip else { return decoded(body, gzip: false, receivedAt: receivedAt, key: principal) }
        switch inflate(body, upTo: min(inflatedLimit, limits.maxBodyBytes)) {
        case .failure(let error) where error.code == .payloadTooLarge && inflatedLimit < limits.maxBodyBytes: return nil
        case let inflated: return inflated.flatMap { decode($0, receivedAt: receivedAt, serverKey: principal.server, networks: principal.networks) }
        }
    }

    /// The gzip body inflated (to at most `maxSize` bytes, the batch limit unless given), or
    /// the error to answer.
    private func inflate(_ body: ByteBuffer, upTo maxSize: Int? = nil) -> Result<ByteBuffer, APIError> {
        do {
            return .success(try Gunzip.decompress(body, maxSize: maxSize ?? limits.maxBodyBytes))
        } catch {
            switch error {
            case .tooLarge: return .failure(Self.tooLarge(limits))
            case .invalid(let why): return .failure(APIError(.invalidGzip, why))
            }
        }
    }

    /// The batch in `body`, or the error to answer.
    private func decode(_ body: ByteBuffer, receivedAt: Timestamp, serverKey: Bool, networks: NetworkScope?) -> Result<DecodedBatch, APIError> {
        do {
            return .success(try decoder.decode(Array(body.readableBytesView), receivedAt: receivedAt, serverKey: serverKey,
                                               networks: networks))
        } catch {
            return .failure(APIError.from(error))
        }
    }

    /// The whole body, at most `limit` bytes (`413` beyond, whether or not it declared its
    /// length), each chunk counted against the body budget while the body is being read.
    private func readBody(_ request: Request, upTo limit: Int) async throws -> ByteBuffer {
        var body = ByteBuffer()
        var held = 0
        defer { bodyBudget.release(held) }
        for try await chunk in request.body {
            guard body.readableBytes + chunk.readableBytes <= limit else { throw Self.tooLarge(limits) }
            guard bodyBudget.take(chunk.readableBytes) else { throw bodyBudgetRefusal() }
            held += chunk.readableBytes
            var chunk = chunk
            body.writeBuffer(&chunk)
        }
        return body
    }

    /// The refusal of a body whose bytes would pass the body budget, counted.
    func bodyBudgetRefusal() -> APIError {
        metrics.refused(by: .bodyBuffer)
        return APIError(.overloaded, "the tracker is reading too many request bodies at once; nothing of this batch was stored, retry after the delay", retryAfterSeconds: 1)
    }

    static func tooLarge(_ limits: IngestLimits) -> APIError {
        APIError(.payloadTooLarge, "the body is over \(limits.maxBodyBytes / 1024) KiB after decompression; send at most \(limits.maxEventsPerBatch) events and \(limits.maxBodyBytes / 1024) KiB per batch")
    }

    /// Whether the media type (before any `;` parameter, in any case) is `application/json`.
    static func isJSON(_ contentType: String) -> Bool {
        var mediaType = Substring(contentType).utf8[...]
        if let semicolon = mediaType.firstIndex(of: UInt8(ascii: ";")) { mediaType = mediaType[..<semicolon] }
        return ASCII.trimmingSpaces(mediaType).elementsEqual("application/json".utf8) { ASCII.lowercased($0) == $1 }
    }

    /// `{"accepted": n, "duplicates": n, "rejected": [{"index": i, "id": "…", "error": "…"}]}`
    package static func receiptBody(outcome: AppendOutcome, rejected: [Rejection]) -> String {
        var body = "{\"accepted\":\(outcome.stored),\"duplicates\":\(outcome.duplicates),\"rejected\":["
        for (n, r) in rejected.enumerated() {
            if n > 0 { body += "," }
            body += "{\"index\":\(r.index),\"id\":"
            if let id = r.id { JSONText.appendQuoted(id, to: &body) } else { body += "null" }
            body += ",\"error\":"
            JSONText.appendQuoted(r.error, to: &body)
            body += "}"
        }
        return body + "]}"
    }
}

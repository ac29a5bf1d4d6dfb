import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization
import Tracker

/// `GET /v1/pixel.gif`, `GET /v1/click` (signed web beacons, no key) and `POST /v1/beacons`
/// (an ingest key mints them). See docs/CLIENT.md, "Web beacons".
struct BeaconRoutes: Sendable {
    /// `nil` without `TRACKER_BEACON_SECRET`: every beacon endpoint answers 503 and says so.
    let beacons: Beacons?
    let keys: APIKeys
    let log: EventLog
    let rejections: BeaconRejections
    /// How long a click waits for its commit before redirecting anyway: a user's click must not
    /// hang on a frozen database. The append goes on; only its confirmation is not awaited.
    let clickCommitWait: Duration
    /// Where a click's append runs, so that the click waits for it at most `clickCommitWait`.
    let errands: Errands<ContinuousClock>
    /// The browser that fetched a beacon is the event's client, recorded like a batch's sender.
    let clients: ClientIdentity

    /// A transparent 1×1 GIF89a (43 bytes).
    static let pixel: [UInt8] = [
        0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
        0xFF, 0xFF, 0xFF, 0x21, 0xF9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2C, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3B,
    ]

    /// Every beacon answer, errors included: no cache may keep or replay it (a cached pixel
    /// or redirect is an event the tracker never sees), and the page learns nothing it did not send.
    static let headers: HTTPFields = {
        var h = HTTPFields()
        h[.cacheControl] = "no-store, no-cache, must-revalidate, private"
        h[HTTPField.Name("Pragma")!] = "no-cache"
        h[.expires] = "0"
        h[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        h[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        return h
    }()

    static let outcomeHeader = HTTPField.Name("X-Beacon-Outcome")!

    func register(on router: Router<some RequestContext>) {
        router.get("/v1/pixel.gif") { request, context in
            await pixel(request, context: context)
        }
        router.get("/v1/click") { request, context in
            await click(request, context: context)
        }
        router.post("/v1/beacons") { request, context in
            try await mint(request, context: context)
        }
    }

    // MARK: Pixel

    /// The GIF once the impression (or its rejection) is committed; `503` when it cannot be.
    func pixel(_ request: Request, context: some RequestContext) async -> Response {
        let visit: BeaconVisit
        switch verify(request, at: .pixel) {
        case .visit(let v): visit = v
        case .refused(let refusal): return refusal
        }
        let outcome: String
        let client = clients.client(of: request, context: context)
        do {
            outcome = try await store(visit, client: client)
        } catch let error as APIError {
            return Self.error(error)
        } catch {
            return Self.error(APIError(.internal, "the beacon could not be stored"))
        }
        var headers = Self.headers
        headers[.contentType] = "image/gif"
        headers[Self.outcomeHeader] = outcome
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: Self.pixel)))
    }

    // MARK: Click

    /// `302` to the signed destination whenever the token is authentic, recorded or not.
    func click(_ request: Request, context: some RequestContext) async -> Response {
        let visit: BeaconVisit
        switch verify(request, at: .click) {
        case .visit(let v): visit = v
        case .refused(let refusal): return refusal
        }
        let client = clients.client(of: request, context: context)
        let store = { @Sendable () async -> String in
            do {
                return try await self.store(visit, client: client)
            } catch {
                context.logger.warning("beacon click redirected but not recorded", metadata: [
                    "tracker.beacon.outcome": "not_recorded", "tracker.error": "\(String(reflecting: error))",
                ])
                return "not_recorded"
            }
        }
        let outcome = await errands.firstWithin(clickCommitWait, store) ?? "unconfirmed"
        if outcome == "unconfirmed" {
            context.logger.warning("beacon click redirected before its commit was confirmed", metadata: ["tracker.beacon.outcome": "unconfirmed"])
        }
        var headers = Self.headers
        headers[.location] = visit.destination
        headers[Self.outcomeHeader] = outcome
        return Response(status: .found, headers: headers)
    }

    // MARK: Minting

    /// `{"beacons": [{"id", "type", "token", "path", "expiresAt"}]}` for an ingest key.
    func mint(_ request: Request, context: some RequestContext) async throws -> Response {
        let principal = try await keys.principal(for: request, requiring: .ingest)
        guard let beacons else { throw Self.notConfigured }
        guard let contentType = request.headers[.contentType], IngestRoute.isJSON(contentType) else {
            throw APIError(.unsupportedMediaType, "send the beacons with 'Content-Type: application/json'")
        }
        let limit = 256 * 1024
        var body = ByteBuffer()
        for try await chunk in request.body {
            guard body.readableBytes + chunk.readableBytes <= limit else {
                throw APIError(.payloadTooLarge, "the body is over \(limit / 1024) KiB; send at most \(Beacons.maxPerRequest) beacons")
            }
            var chunk = chunk
            body.writeBuffer(&chunk)
        }
        let minted: [MintedBeacon]
        do {
            minted = try beacons.mint(requestBody: Array(body.readableBytesView), issuer: principal.name, now: .now(),
                                      networks: principal.networks)
        } catch {
            throw APIError(.invalidBeaconRequest, error.description)
        }
        return JSONBody.response(["beacons": minted.map { MintedBeaconJSON($0) }], headers: [.cacheControl: "no-store"])
    }

    // MARK: Shared

    private enum Verification {
        case visit(BeaconVisit)
        case refused(Response)
    }

    /// The visit an authentic token for `endpoint` describes, or the refusal to send.
    private func verify(_ request: Request, at endpoint: BeaconEndpoint) -> Verification {
        guard let beacons else { return .refused(Self.error(Self.notConfigured)) }
        let token = request.uri.queryParameters.get("t") ?? ""
        do throws(BeaconTokenError) {
            return .visit(try beacons.receive(token, at: endpoint, receivedAt: .now()))
        } catch {
            return .refused(Self.error(APIError(.invalidBeacon, error.message)))
        }
    }

    /// Appends the event (or records the rejection) durably; the outcome header's value.
    private func store(_ visit: BeaconVisit, client: EventClient) async throws -> String {
        switch visit.outcome {
        case .record(let event):
            let outcome: AppendOutcome
            do {
                outcome = try await log.append([event.sent(by: client, truncatingAddresses: clients.truncatesAddresses)],
                                               keyName: visit.keyName)
            } catch {
                throw APIError.from(error)
            }
            return outcome.stored == 1 ? "recorded" : "duplicate"
        case .reject(let rejection):
            do {
                try await rejections.record(rejection)
            } catch let error as DatabaseError {
                throw APIError.from(error)
            }
            return "rejected_\(rejection.reason.rawValue)"
        }
    }

    static let notConfigured = APIError(
        .beaconsNotConfigured,
        "web beacons are off on this tracker: set TRACKER_BEACON_SECRET (at least 32 bytes, e.g. from 'openssl rand -base64 32') on every replica and restart")

    /// The API's JSON error body with the beacon headers (no cache keeps a refusal either).
    static func error(_ error: APIError) -> Response {
        error.response(adding: headers)
    }
}

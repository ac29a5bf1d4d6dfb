import Foundation

/// Sends an app's native-ad events (load, impression, click, AdChoices, video) to the tracker.
///
/// Recording is synchronous and cheap (the event is appended to a file in the app's storage
/// before the call returns, about the cost of one `write`; no network, no `fsync`), so it can
/// be called from the main actor right next to the ads SDK's own calls. Delivery runs in
/// `run()`: batches at `flushAt` events or after `flushInterval`, gzipped, retried with the
/// same event ids until the server has them, with backoff that honours `Retry-After`.
/// docs/CLIENT.md describes the guarantees.
public final class AdTracker: Sendable {
    /// The settings this tracker was made with.
    public let configuration: Configuration
    /// What happens to the events: deliveries, rejections with the server's message, drops,
    /// retries, stops. One consumer; the newest 1024 are kept while nobody reads.
    public let notices: AsyncStream<Notice>

    let queue: EventQueue
    let courier: Courier
    let clock: any TrackerClock

    /// Why a tracker could not be created.
    public enum OpenError: Error, Sendable, Hashable, CustomStringConvertible {
        /// Another `AdTracker` (in this or another process) uses the queue folder.
        case queueInUse(path: String)

        /// What went wrong, in a sentence for a log.
        public var description: String {
            switch self {
            case .queueInUse(let path): "the queue folder \(path) is in use by another AdTracker; give each one its own folder"
            }
        }
    }

    /// Opens the queue (recovering what an earlier run left unsent) and prepares delivery;
    /// nothing is sent before `run()`.
    ///
    /// Throws only when another tracker holds the queue folder. When the folder cannot be
    /// used at all (no permission, a full disk), the tracker keeps events in memory and says
    /// so with `Notice.storageFailing`.
    public convenience init(configuration: Configuration) throws(OpenError) {
        try self.init(configuration: configuration,
                      transport: URLSessionTransport(endpoint: configuration.endpoint, ingestKey: configuration.ingestKey,
                                                     timeout: configuration.requestTimeout),
                      clock: SystemClock(),
                      random: { Double.random(in: 0..<1) })
    }

    init(configuration: Configuration, transport: any IngestTransport, clock: any TrackerClock,
         random: @escaping @Sendable () -> Double) throws(OpenError) {
        let (notices, continuation) = AsyncStream.makeStream(of: Notice.self, bufferingPolicy: .bufferingNewest(1024))
        var files: QueueFiles?
        var recovery = Recovery()
        var openFailure: Int32?
        do {
            (files, recovery) = try QueueFiles.open(directory: configuration.queueDirectory.path)
        } catch {
            switch error {
            case .inUse: throw .queueInUse(path: configuration.queueDirectory.path)
            case .storage(let code): openFailure = code
            }
        }
        if let openFailure { continuation.yield(.storageFailing(errno: openFailure)) }
        if recovery.damagedBytes > 0 { continuation.yield(.damagedQueueData(bytes: recovery.damagedBytes)) }
        self.configuration = configuration
        self.notices = notices
        self.clock = clock
        queue = EventQueue(files: files, recovery: recovery, limits: configuration.queueLimits, flushAt: configuration.flushAt,
                           segmentBytes: configuration.segmentBytes, clock: clock, notices: continuation)
        courier = Courier(queue: queue, transport: transport, clock: clock, configuration: configuration, random: random)
    }

    deinit {
        // Whoever reads `notices` sees the stream end with the tracker.
        queue.notices.finish()
    }

    /// Delivers events until the calling task is cancelled. Start it once, e.g. at app launch
    /// (`Task { await tracker.run() }`); a second call waits until the first has ended.
    ///
    /// Cancelling it mid-request loses nothing: the batch stays queued and goes again later
    /// (the server counts it as duplicates if it had stored it).
    public func run() async {
        await courier.run()
    }

    /// Sends everything recorded so far without waiting for `flushAt` or `flushInterval`, and
    /// returns when it has left the queue, or as soon as delivery has to wait (no network, a
    /// `Retry-After`) or is stopped. For an app going to the background, or a service exiting.
    ///
    /// Works with or without `run()`: when no task delivers, the calling task does until the
    /// flush is done (so a command-line tool can record, flush and exit).
    @discardableResult
    public func flush() async -> FlushOutcome {
        await courier.flush()
    }

    /// Restarts delivery after `Notice.stopped` (e.g. once the app has a valid key again).
    public func resume() {
        queue.resume()
    }

    /// The counts so far: events queued, delivered, rejected, dropped, requests and retries.
    public var statistics: Statistics {
        queue.statistics
    }

    /// Records `ad_loaded` for an ad the ads SDK has just delivered
    /// (`adLoader(_:didReceive:)`), and returns it for its later events.
    ///
    /// - Parameters:
    ///   - requestId: the ad response this ad object belongs to; one loaded ad, one id.
    ///   - adUnit: the ad unit path the ad was requested for.
    ///   - format: the custom native format it is rendered with.
    ///   - eea: whether the user is in the EEA.
    ///   - reservation: whether a reservation (direct) line item served it.
    ///   - test: whether it is a test ad (reports leave those out unless asked).
    ///   - source: who detects this ad's events unless a call says otherwise: `.app` for a
    ///     custom native ad (the app calls recordImpression / performClickOnAsset), `.sdk` for
    ///     a system format the ads SDK tracks, `.mediation` when a mediation adapter handles
    ///     impressions and clicks itself.
    ///   - adapter: the mediation adapter or network that served it, if any.
    ///   - attributes: attributes every event of this ad carries.
    /// - Returns: the ad, to record its impressions, clicks and AdChoices events on.
    public func adLoaded(requestId: String, adUnit: String, format: NativeAdFormat, eea: Bool = false,
                         reservation: Bool = false, test: Bool = false, source: EventSource = .app, adapter: String? = nil,
                         attributes: [String: AttributeValue] = [:]) -> TrackedAd {
        var ad = self.ad(requestId: requestId, adUnit: adUnit, format: format, eea: eea, reservation: reservation, test: test,
                         source: source, adapter: adapter, attributes: attributes)
        ad.loadEventID = ad.record(.adLoaded, source: nil, assetKey: nil, clickAction: nil, attributes: [:])
        return ad
    }

    /// An ad whose `ad_loaded` was recorded elsewhere (another screen, an adapter): its events
    /// only need the same fields. The parameters are `adLoaded`'s.
    public func ad(requestId: String, adUnit: String, format: NativeAdFormat, eea: Bool = false, reservation: Bool = false,
                   test: Bool = false, source: EventSource = .app, adapter: String? = nil,
                   attributes: [String: AttributeValue] = [:]) -> TrackedAd {
        TrackedAd(tracker: self, requestId: requestId, adUnit: adUnit, format: format, eea: eea, reservation: reservation,
                  test: test, source: source, adapter: adapter, attributes: attributes)
    }

    /// Records `ad_request` for a load the app is starting (`GADAdLoader`'s `loadRequest:`),
    /// and returns it for what the load then gets: ads, an error, mediation networks' answers.
    /// Its latencies are measured from this call on the device's monotonic clock.
    ///
    /// - Parameters:
    ///   - loadId: the load's id, unique per `loadRequest:` call (a new UUID by default).
    ///   - adUnit: the ad unit path the ads are requested for.
    ///   - format: the format asked for, when the app asks for one.
    ///   - adsRequested: how many ads the load asks for (`GADMultipleAdsAdLoaderOptions`' `numberOfAds`, 1 to 5).
    ///   - test: whether it is a test request (reports leave those out unless asked).
    ///   - attributes: attributes every event of this load carries.
    /// - Returns: the load, to record its outcome on.
    public func loadStarted(loadId: String = UUID().uuidString.lowercased(), adUnit: String, format: NativeAdFormat? = nil,
                            adsRequested: Int = 1, test: Bool = false, attributes: [String: AttributeValue] = [:]) -> TrackedLoad {
        let started = clock.monotonic()
        var fields = TrackedLoad.fields(loadId: loadId, adUnit: adUnit, format: format, source: .app, test: test)
        fields.adsRequested = adsRequested
        let id = record(.adRequest, fields: fields, attributes: attributes)
        return TrackedLoad(tracker: self, loadId: loadId, adUnit: adUnit, format: format, test: test, attributes: attributes,
                           started: started, requestEventID: id)
    }

    /// Milliseconds since `start` on the monotonic clock, within the protocol's 0 to 600 000.
    func milliseconds(since start: Duration) -> Int {
        let elapsed = clock.monotonic() - start
        return min(max(Int(elapsed / .milliseconds(1)), 0), 600_000)
    }

    /// Encodes one event and appends it to the queue; its id.
    func record(_ type: EventType, of ad: TrackedAd, source: EventSource?, assetKey: String?, clickAction: ClickAction?,
                attributes: [String: AttributeValue]) -> UUID {
        var fields = ad.fields
        fields.source = source ?? ad.source
        fields.assetKey = assetKey
        fields.clickAction = clickAction
        var merged = ad.attributes
        for (key, value) in attributes { merged[key] = value }
        return record(type, fields: fields, attributes: merged)
    }

    /// Encodes one event with `fields` and appends it to the queue; its id.
    func record(_ type: EventType, fields: EventFields, attributes: [String: AttributeValue]) -> UUID {
        let now = clock.wallMicros()
        let id = EventID.make(wallMicros: now)
        var merged = configuration.attributes
        for (key, value) in attributes { merged[key] = value }
        let json = EventJSON.encode(id: id, type: type, fields: fields, occurredAtMicros: now, attributes: merged)
        let limit = IngestLimits().maxEventBytes
        guard json.count <= limit else {
            queue.rejectUnsent(AdTracker.RejectedEvent(
                id: id, status: 0,
                message: "the event is \(json.count) bytes; the tracker takes at most \(limit) bytes per event: trim its attributes",
                event: String(decoding: json, as: UTF8.self)))
            return id
        }
        queue.append(json, enqueuedAt: now)
        return id
    }
}

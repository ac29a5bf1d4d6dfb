import Foundation

extension AdTracker {
    /// Where to send events, where to keep them until then, and when to send them.
    ///
    /// The defaults suit an app on a phone; docs/CLIENT.md says why each is what it is.
    public struct Configuration: Sendable {
        /// The tracker's base URL; events go to `<endpoint>/v1/events`.
        public var endpoint: URL
        /// A key of the `ingest` scope (`tracker keys create --scope ingest`).
        public var ingestKey: String
        /// The folder of the on-disk queue; created when missing. One `AdTracker` at a time
        /// may use it (a second one gets `OpenError.queueInUse`).
        public var queueDirectory: URL

        /// A batch is sent as soon as this many events wait (100).
        public var flushAt: Int = 100
        /// …or when the oldest waiting event has waited this long (10 s).
        public var flushInterval: Duration = .seconds(10)
        /// At most this many events per request (500, the server's limit); after a `413` the
        /// client sends smaller batches and grows back to this.
        public var maxBatchEvents: Int = IngestLimits().maxEventsPerBatch

        /// How much the queue may hold before the oldest events are dropped.
        public var queueLimits = QueueLimits()
        /// How long to wait between failed attempts.
        public var backoff = Backoff()
        /// How often unsynced queue writes are forced to storage (`fsync`), off the caller's
        /// thread; `nil` leaves it to the operating system. What a power loss can lose depends
        /// on it (docs/CLIENT.md).
        public var syncInterval: Duration? = .seconds(1)
        /// One request's limit, from connecting to the last byte of the answer.
        public var requestTimeout: Duration = .seconds(30)
        /// Attributes added to every event (e.g. `appVersion`); an ad's and a call's own
        /// attributes of the same name win.
        public var attributes: [String: AttributeValue] = [:]
        /// The queue starts a new file past this size, so delivered events free their space
        /// one file at a time.
        public var segmentBytes: Int = 256 * 1024

        /// A configuration with every other setting at its default.
        /// - Parameters:
        ///   - endpoint: The tracker's base URL, e.g. `https://tracker.example.com`.
        ///   - ingestKey: A key of ingest scope (`tracker keys create --scope ingest`).
        ///   - queueDirectory: Where events wait on disk until the tracker acknowledged them.
        public init(endpoint: URL, ingestKey: String, queueDirectory: URL) {
            self.endpoint = endpoint
            self.ingestKey = ingestKey
            self.queueDirectory = queueDirectory
        }
    }

    /// Bounds of the on-disk queue. Past any of them the oldest events are dropped, counted in
    /// `Statistics.dropped` and announced with `Notice.dropped`.
    public struct QueueLimits: Sendable, Hashable {
        /// Events waiting (10 000: days of a busy ad app offline).
        public var maxEvents: Int = 10_000
        /// Bytes on disk, records and their headers (5 MiB).
        public var maxBytes: Int = 5 * 1024 * 1024
        /// An event older than this (by the device clock) is dropped unsent (7 days).
        public var maxAge: Duration = .seconds(7 * 86_400)

        /// The defaults above.
        public init() {}

        /// - Parameters:
        ///   - maxEvents: Events kept on disk at most; the oldest are dropped beyond it.
        ///   - maxBytes: Bytes kept on disk at most.
        ///   - maxAge: Age (by the device clock) past which an event is dropped unsent.
        public init(maxEvents: Int, maxBytes: Int, maxAge: Duration) {
            self.maxEvents = maxEvents
            self.maxBytes = maxBytes
            self.maxAge = maxAge
        }
    }

    /// Exponential backoff with jitter between failed attempts; a server's `Retry-After` is a
    /// floor. Retries never end on their own: only the queue limits drop events.
    public struct Backoff: Sendable, Hashable {
        /// The first wait (1 s); each further failure doubles it.
        public var initial: Duration = .seconds(1)
        /// The longest computed wait (5 minutes).
        public var maximum: Duration = .seconds(300)
        /// A `Retry-After` beyond this is taken as this (1 hour), so a misconfigured proxy
        /// cannot silence the client for days.
        public var maxRetryAfter: Duration = .seconds(3600)

        /// The defaults above.
        public init() {}

        /// - Parameters:
        ///   - initial: The first pause after a failed delivery.
        ///   - maximum: The longest pause, however many deliveries failed.
        ///   - maxRetryAfter: The longest `Retry-After` obeyed.
        public init(initial: Duration, maximum: Duration, maxRetryAfter: Duration = .seconds(3600)) {
            self.initial = initial
            self.maximum = maximum
            self.maxRetryAfter = maxRetryAfter
        }

        /// The wait before attempt `failures + 1`: `initial * 2^(failures-1)` capped at
        /// `maximum`, scaled by a random factor in [0.5, 1) (so a fleet of devices that failed
        /// together does not retry together), and never shorter than `retryAfter`.
        func delay(afterFailures failures: Int, retryAfter: Duration?, random: Double) -> Duration {
            let doublings = min(max(failures - 1, 0), 30)
            let exponential = min(maximum, initial * (1 << doublings))
            let jittered = exponential * (0.5 + min(max(random, 0), 1) / 2)
            guard let retryAfter else { return jittered }
            return max(jittered, min(retryAfter, maxRetryAfter))
        }
    }
}

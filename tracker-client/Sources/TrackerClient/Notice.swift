import Foundation

extension AdTracker {
    /// Something the app may want to log or show in a debug screen, from `AdTracker.notices`.
    public enum Notice: Sendable, Hashable {
        /// A request was answered `200`: `accepted` events stored, `duplicates` the server had
        /// already (a retry of a batch it stored before the answer was lost).
        case delivered(accepted: Int, duplicates: Int)
        /// The server refused one event for good; it is not retried.
        case rejected(RejectedEvent)
        /// Events left the queue unsent.
        case dropped(count: Int, reason: DropReason)
        /// A request failed; the same events (same ids, a new `sentAt`) go again after `after`.
        case retrying(after: Duration, reason: RetryReason)
        /// Delivery stopped because retrying cannot help (a revoked key, a wrong URL); events
        /// keep being queued (within the limits) until `resume()` or the next launch.
        case stopped(StopReason)
        /// The queue could not write to storage (full disk, I/O error): new events are held in
        /// memory and still delivered, but a kill of the app would lose them. Sent once until
        /// storage works again.
        case storageFailing(errno: Int32)
        /// Storage works again after `storageFailing`.
        case storageRecovered
        /// When the queue was opened, its files held this many damaged bytes (a record torn by
        /// a power loss, a bad disk); they were cut off and the events in them are lost. The
        /// records before and after the damage are kept.
        case damagedQueueData(bytes: Int)
    }

    /// One event the server will never store, and its words for why.
    public struct RejectedEvent: Sendable, Hashable {
        /// The event's id, as `AdTracker` returned it when the event was recorded.
        public var id: UUID
        /// The HTTP status of the answer that refused it: `200` for a per-event rejection in a
        /// receipt, `400` or `413` when a batch of this event alone was refused, `0` when the
        /// client did not send it (over `IngestLimits.maxEventBytes`, which the server refuses).
        public var status: Int
        /// The server's message, naming the field and the rule (e.g. "assetKey is required for click").
        public var message: String
        /// The event as it was sent (JSON).
        public var event: String
    }

    /// Why events left the queue unsent.
    public enum DropReason: String, Sendable, Hashable, CaseIterable {
        /// More than `QueueLimits.maxEvents` were waiting.
        case eventLimit
        /// The queue's files passed `QueueLimits.maxBytes`.
        case byteLimit
        /// Older than `QueueLimits.maxAge`.
        case tooOld
        /// A record in the queue's files was damaged (a torn write at a power loss, a bad disk).
        case damaged
    }

    /// Why a request is retried.
    public enum RetryReason: Sendable, Hashable {
        /// No answer: no network, a refused connection, a timeout.
        case transport(String)
        /// An answer that asks to come back later (`429`, `503`, other `5xx`, `408`), or a
        /// `2xx`/`3xx` that is not the tracker's receipt (a captive portal).
        case status(Int, error: String?, message: String?)
    }

    /// Why delivery stopped.
    public struct StopReason: Sendable, Hashable {
        /// `401` unknown or revoked key, `403` a key without the ingest scope, `404`/`405` a
        /// wrong endpoint, `415` something between rewrote the request, …
        public var status: Int
        /// The server's error code, e.g. `unauthorized`.
        public var error: String?
        /// The server's message, naming the field and the rule.
        public var message: String?
    }

    /// What `flush()` achieved.
    public enum FlushOutcome: Sendable, Hashable {
        /// Every event recorded before the call has left the queue: stored, or rejected or
        /// dropped (and announced as such).
        case delivered
        /// An attempt failed; the next is after `after`. Nothing is lost.
        case willRetry(after: Duration, reason: RetryReason)
        /// Delivery is stopped (see `Notice.stopped`).
        case stopped(StopReason)
        /// The task delivering for this flush ended first (`run()` or the flushing task was
        /// cancelled); the events stay queued.
        case notRunning
    }

    /// Counters since the tracker was created.
    public struct Statistics: Sendable, Hashable {
        /// Events the app recorded.
        public var recorded = 0
        /// Events found in the queue's files when the tracker opened them.
        public var recovered = 0
        /// Events the server stored.
        public var accepted = 0
        /// Events the server already had.
        public var duplicates = 0
        /// Events the server refused for good.
        public var rejected = 0
        /// Events dropped unsent, by reason.
        public var dropped: [DropReason: Int] = [:]
        /// Damaged bytes cut off the queue's files when they were opened (`Notice.damagedQueueData`).
        public var damagedBytes = 0
        /// Events waiting now.
        public var pending = 0
        /// Bytes of the waiting events, with their record headers.
        public var pendingBytes = 0
        /// Waiting events that are only in memory because storage failed.
        public var pendingInMemory = 0
        /// Requests sent, and how many of them failed and were retried.
        public var requests = 0
        /// Requests that failed and were sent again.
        public var retries = 0
    }
}

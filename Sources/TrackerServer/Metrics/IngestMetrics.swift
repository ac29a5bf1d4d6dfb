import Metrics
import Synchronization
import Tracker

/// What `POST /v1/events` did with events and batches; every metric is made once, here.
final class IngestMetrics: Sendable {
    /// Events stored by this request (`accepted` in the receipt).
    let accepted = Counter(label: "tracker_events_accepted_total")
    /// Valid events whose id was already stored (`duplicates` in the receipt).
    let duplicates = Counter(label: "tracker_events_duplicate_total")
    /// Events in each parsed batch (`accepted + duplicates + rejected`).
    let batchEvents = Recorder(label: "tracker_batch_events")
    private let rejected = Mutex<[String: Counter]>([:])
    private let admissions: [AdmissionLimit: Counter]

    /// Which limit refused a batch with `429` or `503` before anything of it was stored.
    enum AdmissionLimit: String, CaseIterable {
        /// `TRACKER_MAX_CONCURRENT_BATCHES` batches were being handled.
        case concurrentBatches = "concurrent_batches"
        /// `TRACKER_BODY_BUFFER_MIB` of bodies were being read.
        case bodyBuffer = "body_buffer"
        /// The event log's queue was full.
        case queue
        /// The key's `TRACKER_RATE_LIMIT` was spent (`429`).
        case rateLimit = "rate_limit"
    }

    init() {
        admissions = Dictionary(uniqueKeysWithValues: AdmissionLimit.allCases.map {
            ($0, Counter(label: "tracker_admission_rejections_total", dimensions: [("limit", $0.rawValue)]))
        })
    }

    func refused(by limit: AdmissionLimit) {
        admissions[limit]?.increment()
    }

    /// Counts a parsed batch: its size, and each rejected event under the field of the first
    /// rule it broke (`tracker_events_rejected_total{reason}`).
    func parsed(events: Int, rejected rejections: [Rejection]) {
        batchEvents.record(events)
        count(rejections)
    }

    /// Counts rejected events by reason (also those the database refused: reason `storage`).
    func count(_ rejections: [Rejection]) {
        guard !rejections.isEmpty else { return }
        rejected.withLock { counters in
            for r in rejections {
                if let c = counters[r.reason] {
                    c.increment()
                } else {
                    let c = Counter(label: "tracker_events_rejected_total", dimensions: [("reason", r.reason)])
                    counters[r.reason] = c
                    c.increment()
                }
            }
        }
    }

    func stored(_ outcome: AppendOutcome) {
        if outcome.stored > 0 { accepted.increment(by: outcome.stored) }
        if outcome.duplicates > 0 { duplicates.increment(by: outcome.duplicates) }
    }
}

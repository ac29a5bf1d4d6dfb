import HTTPTypes
import Hummingbird
import CoreMetrics
import Metrics
import NIOCore
import Prometheus
import Tracker

/// A connection pool and the name its gauges carry.
struct NamedPool: Sendable {
    var name: String
    var pool: ConnectionPool
}

/// Bootstraps swift-metrics with Prometheus (only `tracker serve` does, once per process).
enum PrometheusMetrics {
    /// The registry every metric of the process lands in, with buckets fitted to what each
    /// histogram measures (the library defaults start at 5 ms, above most commits).
    static func bootstrap() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        let fast: [Duration] = [.microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
                                .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
                                .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10)]
        factory.durationHistogramBuckets = [
            "tracker_commit_duration_seconds": fast,
            "tracker_report_duration_seconds": fast,
            "tracker_projector_step_duration_seconds": fast,
        ]
        factory.valueHistogramBuckets = [
            "tracker_batch_events": [1, 2, 5, 10, 25, 50, 100, 250, 500],
            "tracker_commit_events": [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000],
            "tracker_commit_requests": [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000],
        ]
        MetricsSystem.bootstrap(factory)
        return registry
    }
}

/// `GET /metrics`: every metric in Prometheus's text format, no key (docs/OPERATIONS.md says why).
///
/// Gauges of state (queue depth, pool use, projector lag) are read when scraped rather than
/// kept up to date on every request: the hot path pays nothing for them.
struct MetricsRoute: Sendable {
    let registry: PrometheusCollectorRegistry
    let pools: [NamedPool]
    let log: EventLog
    /// Where the projector's lag is read: a connection that may read the log (`ServerDependencies.lagPool`).
    let lagPool: ConnectionPool
    /// Where the lag read runs, so that a scrape waits for it at most `lagDeadline`.
    let errands: Errands<ContinuousClock>
    private let queueDepth = CoreMetrics.Gauge(label: "tracker_queue_events")
    private let queueCapacity = CoreMetrics.Gauge(label: "tracker_queue_capacity_events")
    private let poolGauges: [(inUse: CoreMetrics.Gauge, idle: CoreMetrics.Gauge, waiting: CoreMetrics.Gauge, size: CoreMetrics.Gauge)]
    private let lagEvents = CoreMetrics.Gauge(label: "tracker_projector_lag_events")
    private let lagSeconds = CoreMetrics.Gauge(label: "tracker_projector_lag_seconds")
    private let lagErrors = CoreMetrics.Counter(label: "tracker_projector_lag_errors_total")
    /// 1 when the scrape's lag query got an answer from PostgreSQL, 0 when it failed or took
    /// longer than `lagDeadline`: what the database-unavailable alert reads.
    private let databaseUp = CoreMetrics.Gauge(label: "tracker_database_up")
    /// How long a scrape waits for the lag: a frozen database would otherwise hold the scrape
    /// past Prometheus's timeout, and the scrape would fail instead of saying the database is down.
    static let lagDeadline: Duration = .seconds(3)

    init(registry: PrometheusCollectorRegistry, pools: [NamedPool], log: EventLog, lagPool: ConnectionPool,
         errands: Errands<ContinuousClock>) {
        self.registry = registry
        self.pools = pools
        self.log = log
        self.lagPool = lagPool
        self.errands = errands
        poolGauges = pools.map { named in
            let pool = [("pool", named.name)]
            return (CoreMetrics.Gauge(label: "tracker_db_connections_in_use", dimensions: pool),
                    CoreMetrics.Gauge(label: "tracker_db_connections_idle", dimensions: pool),
                    CoreMetrics.Gauge(label: "tracker_db_connection_waiters", dimensions: pool),
                    CoreMetrics.Gauge(label: "tracker_db_connections_max", dimensions: pool))
        }
    }

    func register(on router: Router<some RequestContext>) {
        router.get("/metrics") { _, _ in
            await scrape()
        }
    }

    func scrape() async -> Response {
        queueDepth.record(log.queuedEvents)
        queueCapacity.record(log.queueCapacity)
        for (named, gauges) in zip(pools, poolGauges) {
            let usage = named.pool.usage
            gauges.inUse.record(usage.inUse)
            gauges.idle.record(usage.idle)
            gauges.waiting.record(usage.waiting)
            gauges.size.record(named.pool.maxConnections)
        }
        let lagPool = lagPool
        let read = await errands.firstWithin(Self.lagDeadline) { () -> Result<ProjectionLag, any Error> in
            do { return .success(try await LogCursor(pool: lagPool).lag()) } catch { return .failure(error) }
        }
        switch read {
        case .success(let lag)?:
            lagEvents.record(lag.events)
            lagSeconds.record(lag.seconds)
            databaseUp.record(1)
        case .failure(let error as DatabaseError)? where error.state == .insufficientPrivilege:
            // The database answered; this node's connections may not read the log (`/readyz` warns).
            lagErrors.increment()
            databaseUp.record(1)
        default:
            lagErrors.increment()
            databaseUp.record(0)
        }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16_384)
        registry.emit(into: &buffer)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                        body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
    }
}

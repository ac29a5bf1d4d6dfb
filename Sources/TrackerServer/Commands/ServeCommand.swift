#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Hummingbird
import Logging
import Prometheus
import Tracker

/// Resolved settings of `tracker serve`.
struct ServeConfiguration: Sendable {
    var host: String
    var port: Int
    var databaseURL: String
    var poolSize: Int
    var writers: Int
    var rateLimit: Int?
    var attributionWindow: Duration
    var runProjector: Bool
    var projectorBatchSize: Int
    var reportDatabaseURL: String?
    /// The projector's and retention's connection (the tracker_projector role); `nil`: `databaseURL`.
    var projectorDatabaseURL: String? = nil
    var retentionDays: Int?
    var maxConcurrentBatches: Int
    var reportWait: Duration
    /// A connection with no request in progress (or a header still arriving) is closed after this.
    var idleTimeout: Duration
    /// A request must arrive whole within this time of its head.
    var requestTimeout: Duration
    var bodyBudgetBytes: Int
    /// An append not committed within this time gets 503 (a frozen or locked database).
    var appendTimeout: Duration
    var connections: ConnectionLimits
    var chartLibraryPath: String
    /// `TRACKER_BEACON_SECRET` (and `TRACKER_BEACON_PREVIOUS_SECRET`); `nil` turns beacons off.
    var beaconSecrets: BeaconSecrets?
    /// How a request's client is found and stored (`TRACKER_TRUSTED_PROXIES`, `TRACKER_IP_STORAGE`).
    var clients = ClientIdentity(trustedProxies: IPRangeSet([]), truncatesAddresses: false)
}

/// How many connections the server keeps open, from the process's descriptor limit.
struct ConnectionLimits: Sendable, Equatable {
    /// Beyond this many open connections, new ones are answered 503 and closed.
    var maxConnections: Int
    /// Beyond this many the listener stops accepting (they wait in the kernel's backlog), so
    /// descriptors remain for the database connections and the runtime.
    var acceptLimit: Int

    /// Descriptors kept for everything that is not a client connection: the database pools,
    /// the event loops, the runtime's own files.
    static func reserve(poolSize: Int) -> Int { 64 + 4 * poolSize }

    static func resolve(descriptorLimit: Int, poolSize: Int, requested: Int?) -> ConnectionLimits {
        let acceptLimit = max(16, descriptorLimit - reserve(poolSize: poolSize))
        let ceiling = max(8, acceptLimit - 32)
        return ConnectionLimits(maxConnections: min(requested ?? 10_000, ceiling), acceptLimit: acceptLimit)
    }
}

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP server: ingestion, reports, ad audit trails, /healthz, /readyz, /metrics, /openapi.yaml and the dashboard at /.",
        discussion: """
            Environment: DATABASE_URL (required unless --database-url), TRACKER_HOST (127.0.0.1), \
            TRACKER_PORT (8080), TRACKER_DB_POOL_SIZE (8), TRACKER_WRITERS (3 group-commit writers), \
            TRACKER_RATE_LIMIT (events/s per key; unset = no limit), TRACKER_ATTRIBUTION_WINDOW (seconds, \
            3600), TRACKER_PROJECTOR (on; 'off' when 'tracker project' runs elsewhere), \
            TRACKER_PROJECTOR_BATCH_SIZE (log events per projector transaction, 20000), \
            PROJECTOR_DATABASE_URL (the projector's and retention's connection, as tracker_projector; \
            unset: DATABASE_URL), REPORT_DATABASE_URL (reports' connection, as tracker_report, or a read \
            replica; unset: DATABASE_URL). DATABASE_URL connects as tracker_ingest in production: a \
            superuser or the owner of the log is warned of at start and in /readyz. TRACKER_RETENTION_DAYS (unset: keep the \
            whole log; N: hourly 'tracker retention --keep-days N'), TRACKER_MAX_CONCURRENT_BATCHES (256 ingest \
            requests in progress at once; more get 503), TRACKER_REPORT_WAIT (5 s a report waits for the \
            projections to include what was committed before it; 0: answer at once), TRACKER_IDLE_TIMEOUT \
            (15 s: an idle keep-alive connection, or one whose request header is still arriving, is closed), \
            TRACKER_REQUEST_TIMEOUT (30 s for a request to arrive whole after its header; then 408 and close), \
            TRACKER_MAX_CONNECTIONS (10000, and at most the descriptor limit minus a reserve; more get 503), \
            TRACKER_BODY_BUFFER_MIB (256 MiB of request bodies being read at once; more get 503), \
            TRACKER_APPEND_TIMEOUT (8 s for a batch to be committed; then 503 with Retry-After, nothing of what \
            was still queued stored; PostgreSQL's statement_timeout and lock_timeout on the log's connections \
            are 3/4 and 1/2 of it), \
            TRACKER_CHARTJS_PATH (the dashboard's Chart.js, /usr/share/javascript/chart.js/chart.min.js from libjs-chart.js), \
            TRACKER_BEACON_SECRET (32+ bytes that sign web beacons, e.g. 'openssl rand -base64 32'; unset: \
            /v1/pixel.gif, /v1/click and /v1/beacons answer 503), TRACKER_BEACON_PREVIOUS_SECRET (the secret \
            before a rotation, still accepted), TRACKER_LOG_LEVEL (info; trace, debug, info, notice, warning, error, critical), TRACKER_LOG_FORMAT \
            (json or text; default text on a terminal, JSON lines otherwise; logs go to standard output), \
            TRACKER_METRICS (on: GET /metrics in Prometheus format; 'off' serves no /metrics and records nothing), \
            TRACKER_TRUSTED_PROXIES (comma-separated addresses or CIDR ranges of proxies whose X-Forwarded-For \
            names the client; unset: the peer is the client), TRACKER_IP_STORAGE (full; 'truncated' stores the \
            /24 of an IPv4 and the /48 of an IPv6 address). \
            SIGTERM or SIGINT drains: no new requests, accepted events are committed, then exit.
            """)

    @Option(help: "Address to listen on (default: $TRACKER_HOST or 127.0.0.1).")
    var host: String?

    @Option(help: "Port to listen on (default: $TRACKER_PORT or 8080).")
    var port: Int?

    @OptionGroup var database: DatabaseOptions

    func resolve() throws -> ServeConfiguration {
        let port = try port ?? environment("TRACKER_PORT").map { value in
            guard let p = Int(value), (0...65535).contains(p) else { throw ValidationError("TRACKER_PORT must be a port number, got '\(value)'") }
            return p
        } ?? 8080
        return ServeConfiguration(
            host: host ?? environment("TRACKER_HOST") ?? "127.0.0.1",
            port: port,
            databaseURL: try database.resolved(),
            poolSize: try positiveInt("TRACKER_DB_POOL_SIZE") ?? 8,
            writers: try positiveInt("TRACKER_WRITERS") ?? 3,
            rateLimit: try positiveInt("TRACKER_RATE_LIMIT"),
            attributionWindow: try attributionWindow(),
            runProjector: environment("TRACKER_PROJECTOR") != "off",
            projectorBatchSize: try projectorBatchSize(),
            reportDatabaseURL: environment("REPORT_DATABASE_URL"),
            projectorDatabaseURL: environment("PROJECTOR_DATABASE_URL"),
            retentionDays: try positiveInt("TRACKER_RETENTION_DAYS"),
            maxConcurrentBatches: try positiveInt("TRACKER_MAX_CONCURRENT_BATCHES") ?? 256,
            reportWait: try reportWait(),
            idleTimeout: .seconds(try positiveInt("TRACKER_IDLE_TIMEOUT") ?? 15),
            requestTimeout: .seconds(try positiveInt("TRACKER_REQUEST_TIMEOUT") ?? 30),
            bodyBudgetBytes: (try positiveInt("TRACKER_BODY_BUFFER_MIB") ?? 256) * 1024 * 1024,
            appendTimeout: .seconds(try positiveInt("TRACKER_APPEND_TIMEOUT") ?? 8),
            connections: ConnectionLimits.resolve(descriptorLimit: raiseDescriptorLimit(),
                                                  poolSize: try positiveInt("TRACKER_DB_POOL_SIZE") ?? 8,
                                                  requested: try positiveInt("TRACKER_MAX_CONNECTIONS")),
            chartLibraryPath: environment("TRACKER_CHARTJS_PATH") ?? DashboardRoutes.defaultChartLibraryPath,
            beaconSecrets: try beaconSecrets(),
            clients: try clientIdentity())
    }

    /// `TRACKER_TRUSTED_PROXIES` and `TRACKER_IP_STORAGE`.
    func clientIdentity() throws -> ClientIdentity {
        var proxies = IPRangeSet([])
        if let text = environment("TRACKER_TRUSTED_PROXIES"), !text.isEmpty {
            do {
                proxies = try ForwardedFor.trustedProxies(text)
            } catch {
                throw ValidationError("TRACKER_TRUSTED_PROXIES: \(error)")
            }
        }
        let truncates: Bool
        switch environment("TRACKER_IP_STORAGE")?.lowercased() {
        case nil, "", "full": truncates = false
        case "truncated": truncates = true
        case let other?: throw ValidationError("TRACKER_IP_STORAGE must be full or truncated, got '\(other)'")
        }
        return ClientIdentity(trustedProxies: proxies, truncatesAddresses: truncates)
    }

    func run() async throws {
        let configuration = try resolve()
        let logger = makeLogger()
        let metricsRegistry: PrometheusCollectorRegistry?
        switch environment("TRACKER_METRICS")?.lowercased() {
        case nil, "on": metricsRegistry = PrometheusMetrics.bootstrap()
        case "off": metricsRegistry = nil
        case let other?: throw ValidationError("TRACKER_METRICS must be on or off, got '\(other)'")
        }
        let app = buildApplication(configuration, logger: logger, metricsRegistry: metricsRegistry)
        try await app.runService()
    }
}

/// Raises the soft limit on open descriptors to the hard limit (at most 1 Mi) and returns it.
///
/// Every connection holds a descriptor; at the soft limit `accept` fails and, worse, the
/// runtime cannot open the files it needs. Containers often start with a low soft limit.
func raiseDescriptorLimit() -> Int {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 1024 }
    let target = min(limit.rlim_max, 1 << 20)
    if limit.rlim_cur < target {
        var raised = limit
        raised.rlim_cur = target
        if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
    }
    return Int(limit.rlim_cur)
}

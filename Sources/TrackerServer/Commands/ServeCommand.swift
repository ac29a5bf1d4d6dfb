#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Hummingbird
import Logging
import NIOCore
import Prometheus
import Tracker

/// Everything `tracker serve` runs with, read once (`init(settings:…)`) and handed whole to
/// `buildApplication`; a value made with `init(databaseURL:)` has every default.
struct ServeConfiguration: Sendable {
    var host = ServeDefaults.host
    var port = ServeDefaults.port
    var databaseURL: String
    var poolSize = ServeDefaults.poolSize
    var writers = ServeDefaults.writers
    /// Events per second per key; `nil`: no limit.
    var rateLimit: Int? = ServeDefaults.rateLimit
    /// Distinct ad units, formats, asset keys and adapters per key and UTC day.
    var dimensionLimits = DimensionBudget.Limits.defaults
    var attributionWindow = AdContribution.defaultAttributionWindow
    var runProjector = true
    var projectorBatchSize = Projector.defaultBatchSize
    /// `TRACKER_PROJECTOR_GROUP`: the shards the projector reads; `nil`: the whole log.
    var projectorGroup: ProjectorGroup? = nil
    var reportDatabaseURL: String? = nil
    /// The projector's and retention's connection (the tracker_projector role); `nil`: `databaseURL`.
    var projectorDatabaseURL: String? = nil
    var retentionDays: Int? = nil
    var maxConcurrentBatches = ServeDefaults.maxConcurrentBatches
    var reportWait = LogCursor.defaultReportWait
    /// `TRACKER_DEFAULT_TZ`: the zone of a report asked without `tz`, and the dashboard's first
    /// zone; `nil`: UTC for reports, the browser's zone for the dashboard.
    var defaultTimeZone: String? = nil
    /// A connection with no request in progress (or a header still arriving) is closed after this.
    var idleTimeout = Duration.seconds(ServeDefaults.idleTimeoutSeconds)
    /// A request must arrive whole within this time of its head.
    var requestTimeout = Duration.seconds(ServeDefaults.requestTimeoutSeconds)
    /// How long a beacon click's redirect waits for its event's commit (the redirect goes then
    /// either way, marked `unconfirmed`): about what a visitor tolerates before a page starts.
    var beaconClickWait = Duration.seconds(2)
    var bodyBudgetBytes = ServeDefaults.bodyBufferMiB * 1024 * 1024
    /// An append not committed within this time gets 503 (a frozen or locked database).
    var appendTimeout = Duration.seconds(ServeDefaults.appendTimeoutSeconds)
    var connections = ConnectionLimits(maxConnections: ServeDefaults.maxConnections, acceptLimit: ServeDefaults.maxConnections)
    var chartLibraryPath = DashboardRoutes.defaultChartLibraryPath
    /// `TRACKER_BEACON_SECRET` (and `TRACKER_BEACON_PREVIOUS_SECRET`); `nil` turns beacons off.
    var beaconSecrets: BeaconSecrets? = nil
    /// How a request's client is found and stored (`TRACKER_TRUSTED_PROXIES`, `TRACKER_IP_STORAGE`).
    var clients = ClientIdentity(trustedProxies: IPRangeSet([]), truncatesAddresses: false)
    /// `GET /metrics` (`TRACKER_METRICS`).
    var metrics = true

    init(databaseURL: String) {
        self.databaseURL = databaseURL
    }

    /// Every setting from `settings`, the flags winning where given, the defaults above where
    /// neither says anything. `descriptorLimit` is the
    /// process's limit on open files, which bounds the connections the server accepts.
    init(settings: Settings, host: String? = nil, port: Int? = nil, databaseURL: String? = nil, descriptorLimit: Int) throws {
        self.init(databaseURL: try settings.databaseURL(flag: databaseURL))
        self.host = host ?? settings.string("TRACKER_HOST") ?? self.host
        self.port = try port ?? settings.string("TRACKER_PORT").map { value in
            guard let p = Int(value), (0...65535).contains(p) else { throw ValidationError("TRACKER_PORT must be a port number, got '\(value)'") }
            return p
        } ?? self.port
        // Read once: the pool's size also bounds the connections the server accepts.
        poolSize = try settings.positiveInt("TRACKER_DB_POOL_SIZE") ?? poolSize
        writers = try settings.positiveInt("TRACKER_WRITERS") ?? writers
        rateLimit = try settings.limit("TRACKER_RATE_LIMIT", default: ServeDefaults.rateLimit)
        dimensionLimits = try settings.dimensionLimits()
        attributionWindow = try settings.attributionWindow()
        runProjector = settings.string("TRACKER_PROJECTOR") != "off"
        projectorBatchSize = try settings.projectorBatchSize()
        projectorGroup = try settings.projectorGroup()
        reportDatabaseURL = settings.string("REPORT_DATABASE_URL")
        projectorDatabaseURL = settings.string("PROJECTOR_DATABASE_URL")
        retentionDays = try settings.positiveInt("TRACKER_RETENTION_DAYS")
        maxConcurrentBatches = try settings.positiveInt("TRACKER_MAX_CONCURRENT_BATCHES") ?? maxConcurrentBatches
        reportWait = try settings.reportWait()
        defaultTimeZone = try settings.defaultTimeZone()
        idleTimeout = try settings.positiveInt("TRACKER_IDLE_TIMEOUT").map { .seconds($0) } ?? idleTimeout
        requestTimeout = try settings.positiveInt("TRACKER_REQUEST_TIMEOUT").map { .seconds($0) } ?? requestTimeout
        bodyBudgetBytes = try settings.positiveInt("TRACKER_BODY_BUFFER_MIB").map { $0 * 1024 * 1024 } ?? bodyBudgetBytes
        appendTimeout = try settings.positiveInt("TRACKER_APPEND_TIMEOUT").map { .seconds($0) } ?? appendTimeout
        connections = ConnectionLimits.resolve(descriptorLimit: descriptorLimit, poolSize: poolSize,
                                               requested: try settings.positiveInt("TRACKER_MAX_CONNECTIONS"))
        chartLibraryPath = settings.string("TRACKER_CHARTJS_PATH") ?? chartLibraryPath
        beaconSecrets = try settings.beaconSecrets()
        clients = try settings.clientIdentity()
        metrics = try settings.metricsOn()
    }
}

/// The defaults of `tracker serve`'s settings, written once: `ServeConfiguration` falls back to them and
/// the command's help prints them.
enum ServeDefaults {
    static let host = "127.0.0.1"
    static let port = 8080
    static let poolSize = 8
    static let maxConnections = 10_000
    static let idleTimeoutSeconds = 15
    static let requestTimeoutSeconds = 30
    static let bodyBufferMiB = 256
    static let writers = 3
    static let maxConcurrentBatches = 256
    static let appendTimeoutSeconds = 8
    /// Above what one node ingests (docs/OPERATIONS.md, "Limits", says why real apps never reach it).
    static let rateLimit = 200_000
    static var attributionWindowSeconds: Int64 { AdContribution.defaultAttributionWindow.components.seconds }
    static var reportWaitSeconds: Int64 { LogCursor.defaultReportWait.components.seconds }
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
        return ConnectionLimits(maxConnections: min(requested ?? ServeDefaults.maxConnections, ceiling), acceptLimit: acceptLimit)
    }
}

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP server: ingestion, reports, ad audit trails, /healthz, /readyz, /metrics, /openapi.yaml and the dashboard at /.",
        discussion: """
            Settings come from the environment (a flag wins where there is one); each with its default.

            Database
              DATABASE_URL [required unless --database-url]
                  the log's connection, as tracker_ingest
              PROJECTOR_DATABASE_URL [DATABASE_URL]
                  the projector's and retention's, as tracker_projector
              REPORT_DATABASE_URL [DATABASE_URL]
                  the reports', as tracker_report, or a read replica
              TRACKER_DB_POOL_SIZE [\(ServeDefaults.poolSize)]
                  connections per pool

            HTTP
              TRACKER_HOST, TRACKER_PORT [\(ServeDefaults.host), \(ServeDefaults.port)]
                  where to listen
              TRACKER_MAX_CONNECTIONS [\(ServeDefaults.maxConnections)]
                  open connections (at most the descriptor limit minus a reserve); more: 503
              TRACKER_IDLE_TIMEOUT [\(ServeDefaults.idleTimeoutSeconds)]
                  seconds an idle connection, or a header still arriving, is kept
              TRACKER_REQUEST_TIMEOUT [\(ServeDefaults.requestTimeoutSeconds)]
                  seconds for a request to arrive whole after its header; then 408
              TRACKER_BODY_BUFFER_MIB [\(ServeDefaults.bodyBufferMiB)]
                  MiB of request bodies being read at once; more get 503

            Ingestion
              TRACKER_WRITERS [\(ServeDefaults.writers)]
                  group-commit writers
              TRACKER_MAX_CONCURRENT_BATCHES [\(ServeDefaults.maxConcurrentBatches)]
                  batches decoded or written at once; more get 503
              TRACKER_APPEND_TIMEOUT [\(ServeDefaults.appendTimeoutSeconds)]
                  seconds for a batch to be committed, then 503
                  (statement_timeout and lock_timeout are 3/8 and 1/4 of it)
              TRACKER_RATE_LIMIT [\(ServeDefaults.rateLimit)]
                  events per second per key on this node; off: no limit
              TRACKER_MAX_AD_UNITS_PER_DAY, TRACKER_MAX_FORMATS_PER_DAY [\(limit(.adUnit)), \(limit(.formatId))]
              TRACKER_MAX_ASSET_KEYS_PER_DAY, TRACKER_MAX_ADAPTERS_PER_DAY [\(limit(.assetKey)), \(limit(.adapter))]
                  distinct values per key and UTC day on this node; past one an event
                  bringing a new value is rejected; off: no limit
              TRACKER_TRUSTED_PROXIES [none]
                  addresses or CIDR ranges whose X-Forwarded-For names the client
              TRACKER_IP_STORAGE [full]
                  full, or truncated: the /24 of an IPv4 and the /48 of an IPv6 address

            Projector and reports
              TRACKER_PROJECTOR [on]
                  off when 'tracker project' runs elsewhere
              TRACKER_PROJECTOR_BATCH_SIZE [\(Projector.defaultBatchSize)]
                  log events per projector transaction
              TRACKER_PROJECTOR_GROUP [the whole log]
                  K/N: on a distributed log, project group K of N of its shards, at once with
                  the projectors of the other groups
              TRACKER_ATTRIBUTION_WINDOW [\(ServeDefaults.attributionWindowSeconds)]
                  seconds after its impression a click is attributed
              TRACKER_REPORT_WAIT [\(ServeDefaults.reportWaitSeconds)]
                  seconds a report waits for what was committed before it; 0: no wait
              TRACKER_DEFAULT_TZ [UTC]
                  IANA zone of a report asked without tz, and the dashboard's first zone
              TRACKER_RETENTION_DAYS [keep all]
                  days of log kept, older partitions dropped hourly

            Web beacons
              TRACKER_BEACON_SECRET [unset: beacons answer 503]
                  32+ bytes that sign beacons, e.g. 'openssl rand -base64 32'
              TRACKER_BEACON_PREVIOUS_SECRET [unset]
                  the secret before a rotation, still accepted

            Logs, metrics, dashboard
              TRACKER_LOG_LEVEL [info]
                  trace, debug, info, notice, warning, error or critical
              TRACKER_LOG_FORMAT [text on a terminal, else json]
                  json or text, on standard output
              TRACKER_METRICS [on]
                  GET /metrics in Prometheus format; off: no /metrics
              TRACKER_CHARTJS_PATH [\(DashboardRoutes.defaultChartLibraryPath)]
                  the dashboard's Chart.js

            DATABASE_URL as a superuser or as the log's owner is warned of at start and in /readyz. SIGTERM or SIGINT drains: no new requests, accepted events are committed, then exit.
            """)

    @Option(help: "Address to listen on (default: $TRACKER_HOST or \(ServeDefaults.host)).")
    var host: String?

    @Option(help: "Port to listen on (default: $TRACKER_PORT or \(ServeDefaults.port)).")
    var port: Int?

    @OptionGroup var database: DatabaseOptions

    func resolve() throws -> ServeConfiguration {
        try ServeConfiguration(settings: .process, host: host, port: port, databaseURL: database.databaseURL,
                               descriptorLimit: raiseDescriptorLimit())
    }

    func run() async throws {
        let configuration = try resolve()
        let app = buildApplication(configuration, logger: makeLogger(),
                                   metricsRegistry: configuration.metrics ? PrometheusMetrics.bootstrap() : nil)
        do {
            try await app.runService()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            // NIO's own text names the system call, not the address or what to do.
            throw CommandFailure("\(configuration.host):\(configuration.port) is already in use, most likely by another tracker "
                                 + "(of an earlier 'make run': 'make stop' stops it); stop it, or listen elsewhere with TRACKER_PORT or --port")
        }
    }
}

/// A dimension's default limit per day, for the help.
private func limit(_ dimension: DimensionBudget.Dimension) -> Int {
    DimensionBudget.Limits.defaults.perDay[dimension] ?? 0
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

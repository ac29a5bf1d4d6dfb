import Hummingbird
import HummingbirdCore
import NIOCore
import Logging
import Prometheus
import ServiceLifecycle
import Tracker

/// The server's connection pools, each use resolved once to the pool that serves it.
struct ServerPools: Sendable {
    /// The primary connections (DATABASE_URL): keys, imports, beacon rejections, health.
    var primary: ConnectionPool
    /// The projector's and retention's connections: PROJECTOR_DATABASE_URL's, else the primary.
    var projection: ConnectionPool
    /// The reports', the audit's and the reconciliation's reads: REPORT_DATABASE_URL's, else the primary.
    var read: ConnectionPool
    /// Where the projector's lag is read for `/readyz` and `/metrics`: a connection that may read
    /// the log and the checkpoint, the projector's or else the reports' (tracker_ingest may not).
    var lag: ConnectionPool
    /// Whether the projector and the reports have roles of their own (`RoleCheck` checks each
    /// pool against the role whose work it does).
    var projectionIsOwn: Bool
    var readIsOwn: Bool
    /// Every pool a service runs, each once, and those `/metrics` reports by name.
    var services: [ConnectionPool]
    var named: [NamedPool]

    init(_ configuration: ServeConfiguration, logger: Logger) {
        primary = ConnectionPool(conninfo: configuration.databaseURL, maxConnections: configuration.poolSize, logger: logger)
        let report = configuration.reportDatabaseURL.map {
            ConnectionPool(conninfo: $0, maxConnections: configuration.poolSize, logger: logger)
        }
        // The projector's own role: one connection projects, one reads the log ahead of it, one
        // runs retention, the rest read the lag for /readyz and /metrics.
        let projector = configuration.projectorDatabaseURL.map {
            ConnectionPool(conninfo: $0, maxConnections: 5, logger: logger)
        }
        projection = projector ?? primary
        read = report ?? primary
        lag = projector ?? report ?? primary
        projectionIsOwn = projector != nil
        readIsOwn = report != nil
        services = [primary] + [projector, report].compactMap { $0 }
        named = [NamedPool(name: "primary", pool: primary)]
            + (projector.map { [NamedPool(name: "projector", pool: $0)] } ?? [])
            + (report.map { [NamedPool(name: "reports", pool: $0)] } ?? [])
    }
}

/// What the routes share, made once by `buildApplication` from a `ServeConfiguration`.
struct ServerDependencies: Sendable {
    var pools: ServerPools
    var keys: APIKeys
    var log: EventLog
    /// What a request waits for only so long (a click's append, the readiness checks, the lag).
    var errands: Errands<ContinuousClock>
    var migrator: Migrator
    var reports: Reports
    var audit: AdAudit
    var rateLimiter: RateLimiter?
    var dimensionBudget: DimensionBudget?
    /// The ingest admission places, shared with each connection's `QuickAnswers` (which
    /// refuses a batch at its head when all are taken).
    var admission: Admission
    /// A batch's limits: the ingest route decodes by them, and `QuickAnswers` reckons from them
    /// the events a batch reserves at its head.
    var ingestLimits = IngestLimits()
    /// Bytes of ingest bodies still arriving, shared by the route and `QuickAnswers`.
    var bodyBudget: BodyBudget
    var chartLibraryPath: String
    /// `TRACKER_DEFAULT_TZ`, for the reports and the dashboard.
    var defaultTimeZone: String? = nil
    /// The Prometheus registry `/metrics` serves; `nil` when metrics are off.
    var metricsRegistry: PrometheusCollectorRegistry?
    /// `nil` without `TRACKER_BEACON_SECRET`: the beacon endpoints answer 503.
    var beacons: Beacons?
    /// The in-process projector's state (`nil` with TRACKER_PROJECTOR=off), for `/readyz`.
    var projectorStatus: ProjectorStatus?
    var roleWarnings: RoleWarnings
    /// How a request's client is found and stored with its events.
    var clients: ClientIdentity
    /// How long a beacon click's redirect waits for its event's commit before it goes anyway
    /// (the visitor is not kept waiting on the database).
    var beaconClickWait: Duration
}

extension ServerDependencies {
    /// `POST /v1/events`, as the router and `QuickAnswers` both run it.
    var ingestRoute: IngestRoute {
        IngestRoute(keys: keys, log: log, decoder: BatchDecoder(limits: ingestLimits), rateLimiter: rateLimiter,
                    dimensionBudget: dimensionBudget, admission: admission, bodyBudget: bodyBudget, metrics: IngestMetrics(),
                    clients: clients)
    }
}

func buildRouter(_ deps: ServerDependencies) -> Router<TrackerRequestContext> {
    // HEAD is answered wherever GET is (RFC 9110 requires both of a general-purpose server).
    let router = Router(context: TrackerRequestContext.self, options: .autoGenerateHeadEndpoints)
    router.add(middleware: RequestObserver(metrics: HTTPMetrics()))
    router.add(middleware: ErrorBodyMiddleware())
    HealthRoutes(pool: deps.pools.primary, migrator: deps.migrator, lagPool: deps.pools.lag, errands: deps.errands,
                 roleWarnings: deps.roleWarnings,
                 projectorStatus: deps.projectorStatus).register(on: router)
    let reconciliation = ReconciliationRoutes(keys: deps.keys,
                                              reconciliations: Reconciliations(pool: deps.pools.primary, readPool: deps.pools.read),
                                              reports: deps.reports)
    ReportRoutes(keys: deps.keys, reports: deps.reports, reconciliation: reconciliation, defaultTimeZone: deps.defaultTimeZone)
        .register(on: router)
    reconciliation.register(on: router)
    AdAuditRoute(keys: deps.keys, audit: deps.audit).register(on: router)
    deps.ingestRoute.register(on: router)
    BeaconRoutes(beacons: deps.beacons, keys: deps.keys, log: deps.log, rejections: BeaconRejections(pool: deps.pools.primary),
                 clickCommitWait: deps.beaconClickWait, errands: deps.errands, clients: deps.clients)
        .register(on: router)
    DocumentRoutes().register(on: router)
    DashboardRoutes(chartLibraryPath: deps.chartLibraryPath, defaultTimeZone: deps.defaultTimeZone).register(on: router)
    if let registry = deps.metricsRegistry {
        MetricsRoute(registry: registry, pools: deps.pools.named, log: deps.log, lagPool: deps.pools.lag, errands: deps.errands)
            .register(on: router)
    }
    // Last: it wraps only the not-found answer, and reads the routes registered above.
    router.add(middleware: MethodNotAllowedMiddleware(routes: router.routes))
    return router
}

func buildApplication(_ configuration: ServeConfiguration, logger: Logger,
                      metricsRegistry: PrometheusCollectorRegistry? = nil) -> some ApplicationProtocol {
    let pools = ServerPools(configuration, logger: logger)
    var logConfiguration = EventLog.Configuration()
    logConfiguration.writers = configuration.writers
    logConfiguration.appendTimeout = configuration.appendTimeout
    // The log's own connections: durable commits and the append's timeouts, whatever the
    // database's defaults (see EventLog.Configuration.sessionSetup).
    let ingestPool = ConnectionPool(conninfo: configuration.databaseURL, maxConnections: configuration.writers + 1,
                                    sessionSetup: logConfiguration.sessionSetup, logger: logger)
    let log = EventLog(pool: ingestPool, configuration: logConfiguration, logger: logger)
    let deps = ServerDependencies(
        pools: pools,
        keys: APIKeys(pool: pools.primary),
        log: log,
        errands: Errands(),
        migrator: Migrator(logger: logger),
        reports: Reports(pool: pools.read, maxWait: configuration.reportWait),
        audit: AdAudit(pool: pools.read, maxWait: configuration.reportWait),
        rateLimiter: configuration.rateLimit.map(RateLimiter.init(eventsPerSecond:)),
        dimensionBudget: configuration.dimensionLimits == .off ? nil : DimensionBudget(limits: configuration.dimensionLimits),
        admission: Admission(limit: configuration.maxConcurrentBatches),
        bodyBudget: BodyBudget(limitBytes: configuration.bodyBudgetBytes),
        chartLibraryPath: configuration.chartLibraryPath,
        defaultTimeZone: configuration.defaultTimeZone,
        metricsRegistry: metricsRegistry,
        beacons: configuration.beaconSecrets.map { Beacons(secrets: $0) },
        projectorStatus: configuration.runProjector ? ProjectorStatus() : nil,
        roleWarnings: RoleWarnings(),
        clients: configuration.clients,
        beaconClickWait: configuration.beaconClickWait)
    let connections = ConnectionCounter(limit: configuration.connections.maxConnections)
    let quickAnswers = QuickAnswers.Rules(admission: deps.admission, keys: deps.keys, rateLimiter: deps.rateLimiter,
                                          limits: deps.ingestLimits, ingest: deps.ingestRoute, serverName: "tracker", logger: logger)
    let requestTimeout = TimeAmount.nanoseconds(Int64(configuration.requestTimeout.microseconds) * 1000)
    return Application(
        router: buildRouter(deps),
        server: .http1(configuration: HTTP1Channel.Configuration(
            additionalChannelHandlers: [ConnectionGuard(counter: connections, requestTimeout: requestTimeout, quickAnswers: quickAnswers)],
            idleTimeout: .nanoseconds(Int64(configuration.idleTimeout.microseconds) * 1000))),
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: quickAnswers.serverName,
            // The listener stops accepting before the process runs out of descriptors; the
            // guard's (lower) limit answers the connections in between with 503.
            availableConnectionsDelegate: MaximumAvailableConnections(configuration.connections.acceptLimit, logger: logger)),
        // The pools first: a service group stops its services in reverse order, so every
        // service that uses a pool (the log draining its queue last of all) stops before it closes.
        // The key table next (it loads when it starts, so QuickAnswers can refuse a batch over
        // its key's rate limit on the event loop from the first requests on); the errands last,
        // stopping right after the HTTP server and before the log their appends wait for.
        services: (pools.services + [ingestPool]).map { $0 as any Service }
            + [deps.keys]
            + backgroundServices(configuration, deps, logger: logger)
            + [roleCheck(configuration, deps, logger: logger), deps.errands],
        logger: logger)
}

/// The event log first (it shuts down last), then the optional projector and retention.
private func backgroundServices(_ configuration: ServeConfiguration, _ deps: ServerDependencies, logger: Logger) -> [any Service] {
    var services: [any Service] = [deps.log]
    if let status = deps.projectorStatus {
        services.append(Projector(pool: deps.pools.projection, attributionWindow: configuration.attributionWindow,
                                  batchSize: configuration.projectorBatchSize, group: configuration.projectorGroup, status: status,
                                  logger: logger))
    }
    if let keepDays = configuration.retentionDays {
        services.append(RetentionService(pool: deps.pools.projection, keepDays: keepDays, logger: logger))
    }
    return services
}

/// Checks each of the server's connections against the role whose work it does.
private func roleCheck(_ configuration: ServeConfiguration, _ deps: ServerDependencies, logger: Logger) -> RoleCheck {
    func setting(_ role: DatabaseRole, own: Bool) -> String {
        (own ? role : DatabaseRole.ingest).setting
    }
    let pools = deps.pools
    var uses = [RoleCheck.Use(role: .ingest, setting: DatabaseRole.ingest.setting, pool: pools.primary)]
    if configuration.runProjector || configuration.retentionDays != nil {
        uses.append(RoleCheck.Use(role: .projector, setting: setting(.projector, own: pools.projectionIsOwn), pool: pools.projection))
    }
    uses.append(RoleCheck.Use(role: .report, setting: setting(.report, own: pools.readIsOwn), pool: pools.read))
    return RoleCheck(uses: uses, warnings: deps.roleWarnings, logger: logger)
}

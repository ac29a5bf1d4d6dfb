import ArgumentParser
import Hummingbird
import Logging
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
    var retentionDays: Int?
    var maxConcurrentBatches: Int
    var reportWait: Duration
    var chartLibraryPath: String
}

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the HTTP server: ingestion, reports, /healthz, /readyz, /openapi.yaml and the dashboard at /.",
        discussion: """
            Environment: DATABASE_URL (required unless --database-url), TRACKER_HOST (127.0.0.1), \
            TRACKER_PORT (8080), TRACKER_DB_POOL_SIZE (8), TRACKER_WRITERS (3 group-commit writers), \
            TRACKER_RATE_LIMIT (events/s per key; unset = no limit), TRACKER_ATTRIBUTION_WINDOW (seconds, \
            3600), TRACKER_PROJECTOR (on; 'off' when 'tracker project' runs elsewhere), \
            TRACKER_PROJECTOR_BATCH_SIZE (log events per projector transaction, 20000), \
            REPORT_DATABASE_URL (a read replica for reports), TRACKER_RETENTION_DAYS (unset: keep the \
            whole log; N: hourly 'tracker retention --keep-days N'), TRACKER_MAX_CONCURRENT_BATCHES (256 ingest \
            requests in progress at once; more get 503), TRACKER_REPORT_WAIT (5 s a report waits for the \
            projections to include what was committed before it; 0: answer at once), TRACKER_CHARTJS_PATH \
            (the dashboard's Chart.js, /usr/share/javascript/chart.js/chart.min.js from libjs-chart.js), \
            TRACKER_LOG_LEVEL (info). \
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
            retentionDays: try positiveInt("TRACKER_RETENTION_DAYS"),
            maxConcurrentBatches: try positiveInt("TRACKER_MAX_CONCURRENT_BATCHES") ?? 256,
            reportWait: try reportWait(),
            chartLibraryPath: environment("TRACKER_CHARTJS_PATH") ?? DashboardRoutes.defaultChartLibraryPath)
    }

    func run() async throws {
        let configuration = try resolve()
        let logger = makeLogger()
        let app = buildApplication(configuration, logger: logger)
        try await app.runService()
    }
}

func positiveInt(_ name: String) throws -> Int? {
    guard let value = environment(name) else { return nil }
    guard let n = Int(value), n > 0 else { throw ValidationError("\(name) must be a positive integer, got '\(value)'") }
    return n
}

/// `TRACKER_PROJECTOR_BATCH_SIZE`: log events per projector transaction (default 20000).
func projectorBatchSize() throws -> Int {
    try positiveInt("TRACKER_PROJECTOR_BATCH_SIZE") ?? 20_000
}

/// `TRACKER_REPORT_WAIT` in seconds (default 5, 0 = never wait): how long a report waits for the
/// projections to include every event committed when it was asked (see `Reports`).
func reportWait() throws -> Duration {
    guard let value = environment("TRACKER_REPORT_WAIT") else { return .seconds(5) }
    guard let seconds = Double(value), seconds >= 0, seconds <= 3600 else {
        throw ValidationError("TRACKER_REPORT_WAIT must be a number of seconds from 0 to 3600, got '\(value)'")
    }
    return .milliseconds(Int64(seconds * 1000))
}

/// `TRACKER_ATTRIBUTION_WINDOW` in seconds (SPEC: default 1 hour). Changing it needs `tracker rebuild`.
func attributionWindow() throws -> Duration {
    .seconds(try positiveInt("TRACKER_ATTRIBUTION_WINDOW") ?? 3600)
}

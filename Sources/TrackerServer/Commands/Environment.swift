#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Logging
import Tracker

/// Reads one environment variable.
func environment(_ name: String) -> String? {
    getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
}

/// A positive integer from the environment variable `name`, `nil` when it is unset.
func positiveInt(_ name: String) throws -> Int? {
    guard let value = environment(name) else { return nil }
    guard let n = Int(value), n > 0 else { throw ValidationError("\(name) must be a positive integer, got '\(value)'") }
    return n
}

/// `TRACKER_PROJECTOR_BATCH_SIZE`: log events per projector transaction (default 20000).
func projectorBatchSize() throws -> Int {
    try positiveInt("TRACKER_PROJECTOR_BATCH_SIZE") ?? Projector.defaultBatchSize
}

/// `TRACKER_REPORT_WAIT` in seconds (default 5, 0 = never wait): how long a report waits for the
/// projections to include every event committed when it was asked (see `Reports`).
func reportWait() throws -> Duration {
    guard let value = environment("TRACKER_REPORT_WAIT") else { return LogCursor.defaultReportWait }
    guard let seconds = Double(value), seconds >= 0, seconds <= 3600 else {
        throw ValidationError("TRACKER_REPORT_WAIT must be a number of seconds from 0 to 3600, got '\(value)'")
    }
    return .milliseconds(Int64(seconds * 1000))
}

/// `TRACKER_BEACON_SECRET` and `TRACKER_BEACON_PREVIOUS_SECRET`: `nil` when beacons are off;
/// a secret too short to be safe stops the command rather than signing with it.
func beaconSecrets() throws -> BeaconSecrets? {
    guard let current = environment("TRACKER_BEACON_SECRET") else {
        if environment("TRACKER_BEACON_PREVIOUS_SECRET") != nil {
            throw ValidationError("TRACKER_BEACON_PREVIOUS_SECRET is set without TRACKER_BEACON_SECRET: a rotation keeps the old secret next to a new one")
        }
        return nil
    }
    do {
        return try BeaconSecrets(current: current, previous: environment("TRACKER_BEACON_PREVIOUS_SECRET"))
    } catch {
        throw ValidationError(error.description)
    }
}

/// `TRACKER_ATTRIBUTION_WINDOW` in seconds (PROTOCOL.md: default 1 hour). Changing it needs `tracker rebuild`.
func attributionWindow() throws -> Duration {
    try positiveInt("TRACKER_ATTRIBUTION_WINDOW").map { .seconds($0) } ?? AdContribution.defaultAttributionWindow
}

/// Options every command that talks to PostgreSQL shares.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "PostgreSQL URL or conninfo string (default: $DATABASE_URL).")
    var databaseURL: String?

    func resolved() throws -> String {
        if let databaseURL { return databaseURL }
        if let url = environment("DATABASE_URL") { return url }
        throw ValidationError("no database: pass --database-url or set DATABASE_URL (e.g. postgresql://tracker@127.0.0.1:5432/tracker)")
    }

    /// A pool on the database (one connection unless asked for more); the command closes it.
    func pool(maxConnections: Int = 1, logger: Logger = makeLogger()) throws -> ConnectionPool {
        ConnectionPool(conninfo: try resolved(), maxConnections: maxConnections, logger: logger)
    }

    /// One connection for reading projections: an explicit --database-url wins, otherwise the
    /// read replica (REPORT_DATABASE_URL) when one is configured, otherwise DATABASE_URL.
    func reportPool() throws -> ConnectionPool {
        let url = try databaseURL ?? environment("REPORT_DATABASE_URL") ?? resolved()
        return ConnectionPool(conninfo: url, maxConnections: 1, logger: makeLogger())
    }
}

/// The process-wide logger; only the executable bootstraps a log handler (`bootstrapLogging`),
/// which sets the level from `TRACKER_LOG_LEVEL`.
func makeLogger(label: String = "tracker") -> Logger {
    Logger(label: label)
}

/// Bootstraps `LineLogHandler` for the command about to run: servers log to standard output,
/// other commands to standard error (see `LogSettings`).
func bootstrapLogging(for command: any ParsableCommand) throws {
    let settings = try LogSettings.resolve(server: command is ServeCommand || command is ProjectCommand,
                                           format: environment("TRACKER_LOG_FORMAT"),
                                           level: environment("TRACKER_LOG_LEVEL"))
    LoggingSystem.bootstrap { label in
        LineLogHandler(label: label, format: settings.format, stream: settings.stream, level: settings.level)
    }
}

/// A command that could not do its work; printed as "Error: <message>" without the usage text.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ message: String) { description = message }
}

extension Duration {
    /// The duration in seconds, for rates and printed timings.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Writes to file descriptor 2 without touching C's global `stderr`.
func writeToStandardError(_ text: String) {
    var text = text
    text.withUTF8 { buffer in _ = write(2, buffer.baseAddress, buffer.count) }
}

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

/// Options every command that talks to PostgreSQL shares.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "PostgreSQL URL or conninfo string (default: $DATABASE_URL).")
    var databaseURL: String?

    func resolved() throws -> String {
        if let databaseURL { return databaseURL }
        if let url = environment("DATABASE_URL") { return url }
        throw ValidationError("no database: pass --database-url or set DATABASE_URL (e.g. postgresql://tracker@127.0.0.1:5432/tracker)")
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

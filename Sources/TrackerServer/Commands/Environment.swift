#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Logging

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
}

/// The process-wide logger; only the executable bootstraps a log handler.
func makeLogger(label: String = "tracker") -> Logger {
    var logger = Logger(label: label)
    logger.logLevel = environment("TRACKER_LOG_LEVEL").flatMap(Logger.Level.init(rawValue:)) ?? .info
    return logger
}

func bootstrapLogging() {
    LoggingSystem.bootstrap { label in StreamLogHandler.standardError(label: label) }
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

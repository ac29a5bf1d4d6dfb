#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Foundation
import Logging
import Tracker

/// The settings the environment gives, each read through one rule with its default: `tracker
/// serve` resolves its whole `ServeConfiguration` from one `Settings`, the other commands read
/// the few they use, and the tests hand a dictionary instead of the process's environment, so
/// the rules they exercise are the ones a deployment meets.
struct Settings: Sendable {
    private let values: [String: String]

    /// Settings from `values`; an empty value counts as unset.
    init(_ values: [String: String]) {
        self.values = values.filter { !$0.value.isEmpty }
    }

    /// The process's environment, read once (the first of duplicate entries wins, as with `getenv`).
    static let process: Settings = {
        var values: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "="), values[String(text[..<equals])] == nil {
                values[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            entry += 1
        }
        return Settings(values)
    }()

    /// The value of `name`, `nil` when unset or empty.
    func string(_ name: String) -> String? { values[name] }

    /// A positive integer, `nil` when unset.
    func positiveInt(_ name: String) throws -> Int? {
        guard let value = values[name] else { return nil }
        guard let n = Int(value), n > 0 else { throw ValidationError("\(name) must be a positive integer, got '\(value)'") }
        return n
    }

    /// The database: `flag` (`--database-url`) if given, else `DATABASE_URL`.
    func databaseURL(flag: String?) throws -> String {
        if let flag { return flag }
        if let url = values["DATABASE_URL"] { return url }
        throw ValidationError("no database: pass --database-url or set DATABASE_URL (e.g. postgresql://tracker@127.0.0.1:5432/tracker)")
    }

    /// `TRACKER_PROJECTOR_BATCH_SIZE`: log events per projector transaction.
    func projectorBatchSize() throws -> Int {
        try positiveInt("TRACKER_PROJECTOR_BATCH_SIZE") ?? Projector.defaultBatchSize
    }

    /// `TRACKER_PROJECTOR_GROUP` (`K/N`): the group of a distributed log's shards this
    /// process's projector reads; `nil`: the whole log.
    func projectorGroup() throws -> ProjectorGroup? {
        guard let value = values["TRACKER_PROJECTOR_GROUP"], !value.isEmpty else { return nil }
        return try Self.projectorGroup(value, name: "TRACKER_PROJECTOR_GROUP")
    }

    /// `K/N` parsed, or an error naming `name` and the rule.
    static func projectorGroup(_ value: String, name: String) throws -> ProjectorGroup {
        guard let group = ProjectorGroup(value) else {
            throw ValidationError("\(name) must be K/N, group K of N (1 ≤ K ≤ N ≤ \(ProjectorGroup.maxCount)), got '\(value)'")
        }
        return group
    }

    /// `TRACKER_REPORT_WAIT` in seconds (0 = never wait): how long a report waits for the
    /// projections to include every event committed when it was asked (see `Reports`).
    func reportWait() throws -> Duration {
        guard let value = values["TRACKER_REPORT_WAIT"] else { return LogCursor.defaultReportWait }
        guard let seconds = Double(value), seconds >= 0, seconds <= 3600 else {
            throw ValidationError("TRACKER_REPORT_WAIT must be a number of seconds from 0 to 3600, got '\(value)'")
        }
        return .milliseconds(Int64(seconds * 1000))
    }

    /// `TRACKER_DEFAULT_TZ`: the zone of a report that names none (`nil`: UTC), as the tz
    /// database spells it. A zone the tz database does not know stops the command: a server
    /// started with it would refuse every report asked without `tz`.
    func defaultTimeZone() throws -> String? {
        guard let value = values["TRACKER_DEFAULT_TZ"] else { return nil }
        // Foundation's zones are ICU's copy of the tz database, which needs no connection;
        // each report still checks its zone against PostgreSQL's, as it checks `tz`.
        guard ReportQuery.isZoneName(value), TimeZone(identifier: value) != nil else {
            throw ValidationError("TRACKER_DEFAULT_TZ must be an IANA time zone name as the tz database spells it, such as UTC, America/New_York or Asia/Kolkata, got '\(value)'")
        }
        return value
    }

    /// `TRACKER_BEACON_SECRET` and `TRACKER_BEACON_PREVIOUS_SECRET`: `nil` when beacons are off;
    /// a secret too short to be safe stops the command rather than signing with it.
    func beaconSecrets() throws -> BeaconSecrets? {
        guard let current = values["TRACKER_BEACON_SECRET"] else {
            if values["TRACKER_BEACON_PREVIOUS_SECRET"] != nil {
                throw ValidationError("TRACKER_BEACON_PREVIOUS_SECRET is set without TRACKER_BEACON_SECRET: a rotation keeps the old secret next to a new one")
            }
            return nil
        }
        do {
            return try BeaconSecrets(current: current, previous: values["TRACKER_BEACON_PREVIOUS_SECRET"])
        } catch {
            throw ValidationError(error.description)
        }
    }

    /// `TRACKER_ATTRIBUTION_WINDOW` in seconds. Changing it needs `tracker rebuild`.
    func attributionWindow() throws -> Duration {
        try positiveInt("TRACKER_ATTRIBUTION_WINDOW").map { .seconds($0) } ?? AdContribution.defaultAttributionWindow
    }

    /// `TRACKER_TRUSTED_PROXIES` and `TRACKER_IP_STORAGE`.
    func clientIdentity() throws -> ClientIdentity {
        var proxies = IPRangeSet([])
        if let text = values["TRACKER_TRUSTED_PROXIES"] {
            do {
                proxies = try ForwardedFor.trustedProxies(text)
            } catch {
                throw ValidationError("TRACKER_TRUSTED_PROXIES: \(error)")
            }
        }
        let truncates: Bool
        switch values["TRACKER_IP_STORAGE"]?.lowercased() {
        case nil, "full": truncates = false
        case "truncated": truncates = true
        case let other?: throw ValidationError("TRACKER_IP_STORAGE must be full or truncated, got '\(other)'")
        }
        return ClientIdentity(trustedProxies: proxies, truncatesAddresses: truncates)
    }

    /// A limit: `fallback` when unset, `nil` for `off`, else a positive integer.
    func limit(_ name: String, default fallback: Int) throws -> Int? {
        guard let value = values[name] else { return fallback }
        if value.lowercased() == "off" { return nil }
        guard let n = Int(value), n > 0 else { throw ValidationError("\(name) must be a positive integer or off, got '\(value)'") }
        return n
    }

    /// `TRACKER_MAX_AD_UNITS_PER_DAY`, `TRACKER_MAX_FORMATS_PER_DAY`, `TRACKER_MAX_ASSET_KEYS_PER_DAY`
    /// and `TRACKER_MAX_ADAPTERS_PER_DAY`: distinct values per ingest key and UTC day.
    func dimensionLimits() throws -> DimensionBudget.Limits {
        var limits = DimensionBudget.Limits(perDay: [:])
        for dimension in DimensionBudget.Dimension.allCases {
            limits.perDay[dimension] = try limit(dimension.setting, default: DimensionBudget.Limits.defaults.perDay[dimension]!)
        }
        return limits
    }

    /// `TRACKER_METRICS`: whether `/metrics` is served.
    func metricsOn() throws -> Bool {
        switch values["TRACKER_METRICS"]?.lowercased() {
        case nil, "on": return true
        case "off": return false
        case let other?: throw ValidationError("TRACKER_METRICS must be on or off, got '\(other)'")
        }
    }
}

/// Options every command that talks to PostgreSQL shares.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "PostgreSQL URL or conninfo string (default: $DATABASE_URL).")
    var databaseURL: String?

    func resolved() throws -> String {
        try Settings.process.databaseURL(flag: databaseURL)
    }

    /// A pool on the database (one connection unless asked for more); the command closes it.
    func pool(maxConnections: Int = 1, logger: Logger = makeLogger()) throws -> ConnectionPool {
        ConnectionPool(conninfo: try resolved(), maxConnections: maxConnections, logger: logger)
    }

    /// One connection for reading projections: an explicit --database-url wins, otherwise the
    /// read replica (REPORT_DATABASE_URL) when one is configured, otherwise DATABASE_URL.
    func reportPool() throws -> ConnectionPool {
        let url = try databaseURL ?? Settings.process.string("REPORT_DATABASE_URL") ?? resolved()
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
    let environment = Settings.process
    let settings = try LogSettings.resolve(server: command is ServeCommand || command is ProjectCommand,
                                           format: environment.string("TRACKER_LOG_FORMAT"),
                                           level: environment.string("TRACKER_LOG_LEVEL"))
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

import ArgumentParser
import Tracker

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Print a report (summary, assets, sources, adchoices, ivt, funnel, failures, waterfall or reconciliation) as a table, CSV or JSON.",
        discussion: """
            Reads the projections, from REPORT_DATABASE_URL when it is set and --database-url is not. \
            Waits up to TRACKER_REPORT_WAIT seconds (5) for the projections to include every event \
            committed before it started; when they still trail the log, a note on standard error says by how much. \
            Without --tz the days are TRACKER_DEFAULT_TZ's, else UTC's. A table ends with a Total row; \
            CSV has one line per row unless --totals is given. Standard error names the report's range and \
            zone (the CSV on standard output stays only CSV). A ratio without a denominator (a CTR \
            without impressions) is "–" in a table, an empty CSV cell, and 0 in JSON.
            """)

    enum Output: String, ExpressibleByArgument, CaseIterable {
        case table, csv, json
    }

    @Argument(help: "summary, assets, sources, adchoices, ivt, funnel, failures, waterfall or reconciliation.")
    var report: String

    @Option(help: "First local day (in --tz), YYYY-MM-DD (inclusive); for reconciliation, default the import's first day.")
    var from: String?

    @Option(help: "Last local day (in --tz), YYYY-MM-DD (inclusive); for reconciliation, default the import's last day.")
    var to: String?

    @Option(name: .customLong("import"), help: "reconciliation: the import's id (tracker reconcile list); default the newest.")
    var importId: String?

    @Option(help: "reconciliation: the largest discrepancy within tolerance, a fraction of Ad Manager's count (0.10).")
    var threshold: String?

    @Option(help: "IANA time zone whose local days (and hours) the rows are, e.g. America/New_York (default: TRACKER_DEFAULT_TZ, else UTC; for reconciliation, the import's, which it must be if given).")
    var tz: String?

    @Option(help: "day or hour: one row per local day, or per local hour (an hour column after day).")
    var granularity: String = ReportGranularity.day.rawValue

    @Option(name: .customLong("ad-unit"), help: "Only this ad unit; ending in '/', every ad unit under that path.")
    var adUnit: String?

    @Option(name: .customLong("ad-unit-level"), help: "Roll ad units up to this many segments after the network code (1 to 100).")
    var adUnitLevel: String?

    @Option(name: .customLong("format-id"), help: "Only this format.")
    var formatId: String?

    @Flag(name: .customLong("include-test"), help: "Include test traffic.")
    var includeTest = false

    @Option(help: "table, csv or json.")
    var output: Output = .table

    @Flag(help: "CSV: end with a Total line (counts summed, ratios of the sums; not for reconciliation). A table always has one.")
    var totals = false

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let pool = try database.reportPool()
        defer { pool.close() }
        if totals && output == .json { throw ValidationError("--totals adds a Total line to --output csv (a table always has one); JSON has none") }
        if report == "reconciliation" {
            if totals { throw ValidationError("--totals is not available for the reconciliation report: its rows compare one day and ad unit each") }
            return try await reconciliation(pool)
        }
        guard from != nil, to != nil else { throw ValidationError("--from and --to are required") }
        let defaultZone = tz == nil ? try Settings.process.defaultTimeZone() : nil
        let query: ReportQuery
        do {
            query = try ReportQuery.parse(report: report, parameter: { name in name == "tz" ? tz ?? defaultZone : parameter(name) })
        } catch {
            throw ValidationError(error.description)
        }
        let result: ReportResult
        do {
            result = try await Reports(pool: pool, maxWait: try Settings.process.reportWait()).run(query)
        } catch ReportQueryError.unknownTimeZone(let zone) where defaultZone != nil {
            throw ValidationError("TRACKER_DEFAULT_TZ is '\(zone)', a zone the database does not know: set it to one it does, or give --tz")
        } catch let error as ReportQueryError {
            throw ValidationError(error.description)
        } catch let error as ReportError {
            throw CommandFailure(error.description)
        }
        if result.lag.events > 0 {
            writeToStandardError("note: the projections trail the log by \(result.lag.events) event(s), \(result.lag.seconds) s; these counts leave them out\n")
        }
        if output != .json { writeToStandardError(Self.heading(result, zoneIsTheDefault: defaultZone != nil)) }
        switch output {
        case .table: print(result.table, terminator: "")
        case .csv: print(result.csv(totals: totals), terminator: "")
        case .json: print(result.json)
        }
    }

    /// What a table or CSV does not say itself: `summary from 2026-11-01 to 2026-11-07, local
    /// days in America/New_York (TRACKER_DEFAULT_TZ)`, on standard error, which leaves standard
    /// output a CSV any reader takes. JSON names a zone other than UTC in its body.
    static func heading(_ result: ReportResult, zoneIsTheDefault: Bool) -> String {
        let query = result.query
        let unit = query.granularity == .hour ? "local days and hours" : "local days"
        return "\(query.kind.rawValue) from \(query.from) to \(query.to), \(unit) in \(query.timeZone)"
            + (zoneIsTheDefault ? " (TRACKER_DEFAULT_TZ)" : "") + "\n"
    }
}

extension ReportCommand {
    /// The options by the name of the API's query parameter they stand for: one set of checks
    /// and messages for `tracker report` and `GET /v1/reports/…`.
    func parameter(_ name: String) -> String? {
        switch name {
        case "from": from
        case "to": to
        case "import": importId
        case "threshold": threshold
        case "adUnit": adUnit
        case "adUnitLevel": adUnitLevel
        case "formatId": formatId
        case "includeTest": includeTest ? "true" : "false"
        case "tz": tz
        case "granularity": granularity
        default: nil
        }
    }

    /// `tracker report reconciliation`: an import beside the tracker's numbers.
    func reconciliation(_ pool: ConnectionPool) async throws {
        let query: ReconciliationQuery
        do {
            query = try ReconciliationQuery.parse(parameter: parameter)
        } catch {
            throw ValidationError(error.description)
        }
        let result: ReconciliationResult
        do {
            result = try await Reconciliations(pool: pool).report(query, reports: Reports(pool: pool, maxWait: try Settings.process.reportWait()))
        } catch ReconciliationError.invalidParameter(let message) {
            throw ValidationError(message)
        } catch let error as ReconciliationError {
            throw CommandFailure(error.description)
        }
        if result.lag.events > 0 {
            writeToStandardError("note: the projections trail the log by \(result.lag.events) event(s), \(result.lag.seconds) s; these counts leave them out\n")
        }
        switch output {
        case .table:
            print("import \(result.imported.id) (\(result.imported.tz)), \(result.from) to \(result.to), tolerance \(String(oneDecimal: result.threshold * 100)) %, rule set \(result.ivtRules)")
            print(result.table, terminator: "")
        case .csv: print(result.csv, terminator: "")
        case .json: print(result.json)
        }
    }
}

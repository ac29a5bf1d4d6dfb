import ArgumentParser
import Tracker

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Print a report (summary, assets, sources, adchoices, ivt, funnel, failures, waterfall or reconciliation) as a table, CSV or JSON.",
        discussion: """
            Reads the projections, from REPORT_DATABASE_URL when it is set and --database-url is not. \
            Waits up to TRACKER_REPORT_WAIT seconds (5) for the projections to include every event \
            committed before it started; when they still trail the log, a note on standard error says by how much.
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

    @Option(help: "IANA time zone whose local days (and hours) the rows are, e.g. America/New_York (default: UTC; for reconciliation, the import's, which it must be if given).")
    var tz: String?

    @Option(help: "day or hour: one row per local day, or per local hour (an hour column after day).")
    var granularity: String = ReportGranularity.day.rawValue

    @Option(name: .customLong("ad-unit"), help: "Only this ad unit.")
    var adUnit: String?

    @Option(name: .customLong("format-id"), help: "Only this format.")
    var formatId: String?

    @Flag(name: .customLong("include-test"), help: "Include test traffic.")
    var includeTest = false

    @Option(help: "table, csv or json.")
    var output: Output = .table

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let pool = try database.reportPool()
        defer { pool.close() }
        if report == "reconciliation" { return try await reconciliation(pool) }
        guard from != nil, to != nil else { throw ValidationError("--from and --to are required") }
        let query: ReportQuery
        do {
            query = try ReportQuery.parse(report: report, parameter: { name in
                switch name {
                case "from": from
                case "to": to
                case "adUnit": adUnit
                case "formatId": formatId
                case "includeTest": includeTest ? "true" : "false"
                case "tz": tz
                case "granularity": granularity
                default: nil
                }
            })
        } catch {
            throw ValidationError(error.description)
        }
        let result: ReportResult
        do {
            result = try await Reports(pool: pool, maxWait: try Settings.process.reportWait()).run(query)
        } catch let error as ReportQueryError {
            throw ValidationError(error.description)
        } catch let error as ReportError {
            throw CommandFailure(error.description)
        }
        if result.lag.events > 0 {
            writeToStandardError("note: the projections trail the log by \(result.lag.events) event(s), \(result.lag.seconds) s; these counts leave them out\n")
        }
        switch output {
        case .table: print(result.table, terminator: "")
        case .csv: print(result.csv, terminator: "")
        case .json: print(result.json)
        }
    }
}

extension ReportCommand {
    /// `tracker report reconciliation`: an import beside the tracker's numbers.
    func reconciliation(_ pool: ConnectionPool) async throws {
        let query: ReconciliationQuery
        do {
            query = try ReconciliationQuery.parse(parameter: { name in
                switch name {
                case "import": importId
                case "from": from
                case "to": to
                case "threshold": threshold
                case "includeTest": includeTest ? "true" : "false"
                case "tz": tz
                case "granularity": granularity
                default: nil
                }
            })
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

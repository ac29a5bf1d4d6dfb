import ArgumentParser
import Tracker

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Print a report (summary, assets, sources or adchoices) as a table, CSV or JSON.",
        discussion: """
            Reads the projections, from REPORT_DATABASE_URL when it is set and --database-url is not. \
            Waits up to TRACKER_REPORT_WAIT seconds (5) for the projections to include every event \
            committed before it started; when they still trail the log, a note on standard error says by how much.
            """)

    enum Output: String, ExpressibleByArgument, CaseIterable {
        case table, csv, json
    }

    @Argument(help: "summary, assets, sources or adchoices.")
    var report: String

    @Option(help: "First local day (in --tz), YYYY-MM-DD (inclusive).")
    var from: String

    @Option(help: "Last local day (in --tz), YYYY-MM-DD (inclusive).")
    var to: String

    @Option(help: "IANA time zone whose local days (and hours) the rows are, e.g. America/New_York.")
    var tz: String = ReportQuery.defaultTimeZone

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
            result = try await Reports(pool: pool, maxWait: try reportWait()).run(query)
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

import ArgumentParser
import Foundation
import Tracker

/// `tracker reconcile import FILE --tz ZONE [--unit-map FILE]` and `tracker reconcile list`.
struct ReconcileCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reconcile",
        abstract: "Import Ad Manager report exports and list them; 'tracker report reconciliation' compares them with the tracker.",
        discussion: "docs/RECONCILIATION.md says which report to export from Ad Manager and how to read the comparison.",
        subcommands: [Import.self, List.self])

    enum Output: String, ExpressibleByArgument, CaseIterable {
        case table, json
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Import an Ad Manager report export (CSV: date, ad unit, ad server impressions and clicks).",
            discussion: """
                Columns are found by header, in the API's spelling (Dimension.DATE, Dimension.AD_UNIT_NAME, \
                Column.AD_SERVER_IMPRESSIONS, Column.AD_SERVER_CLICKS) or the UI's (Date, Ad unit, Ad server \
                impressions, Ad server clicks). An ad unit becomes a path through --unit-map, else as it is when it \
                is a path, else by the one known path whose last segment it is; rows that match none are listed, \
                never dropped. A file that cannot be read exactly is refused whole, naming the row and the column. \
                The same file imported again answers the existing import.
                """)

        @Argument(help: "The CSV export.")
        var file: String

        @Option(help: "The IANA time zone of the file's dates: the Ad Manager network's time zone.")
        var tz: String

        @Option(name: .customLong("unit-map"), help: "A CSV of 'adManager,adUnit' rows: Ad Manager ad unit names to paths.")
        var unitMap: String?

        @Option(help: "table or json.")
        var output: Output = .table

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            func read(_ path: String) throws -> [UInt8] {
                let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                guard size <= Reconciliations.maxBytes else {
                    throw CommandFailure("\(path) is over \(Reconciliations.maxBytes / 1024 / 1024) MiB; export fewer days or ad units per file")
                }
                do {
                    return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
                } catch {
                    throw CommandFailure("cannot read \(path): \(error.localizedDescription)")
                }
            }
            let bytes = try read(file)
            let map = try unitMap.map(read)
            let pool = try database.pool()
            defer { pool.close() }
            let zone: String
            do {
                zone = try await Reports(pool: pool).timeZone(tz)
            } catch let error as ReportQueryError {
                throw ValidationError("--tz: \(error)")
            }
            let imported: ReconciliationImport
            do {
                imported = try await Reconciliations(pool: pool).importReport(bytes, timeZone: zone, unitMap: map, importedBy: "cli")
            } catch let error as ReconciliationError {
                throw CommandFailure("\(file): \(error)")
            }
            switch output {
            case .json: print(imported.json)
            case .table:
                print("\(imported.existing ? "already imported" : "imported") \(imported.id): \(imported.rows) row(s), \(imported.matched) matched, "
                      + "\(imported.firstDay.map(\.description) ?? "-") to \(imported.lastDay.map(\.description) ?? "-") in \(imported.tz)")
                for u in imported.unmatched {
                    let why = u.reason == .ambiguous ? "the last segment of several known ad unit paths" : "no known ad unit path"
                    print("  unmatched: row \(u.row), ad unit '\(u.adUnit)': \(why) (map it with --unit-map)")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the imports, newest first.")

        @Option(help: "table or json.")
        var output: Output = .table

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let pool = try database.reportPool()
            defer { pool.close() }
            let imports = try await Reconciliations(pool: pool).list()
            switch output {
            case .json: print("{\"imports\":[" + imports.map(\.json).joined(separator: ",") + "]}")
            case .table:
                let rows = [["ID", "TZ", "FROM", "TO", "ROWS", "MATCHED", "IMPORTED", "BY"]] + imports.map {
                    [$0.id, $0.tz, $0.firstDay?.description ?? "-", $0.lastDay?.description ?? "-", String($0.rows), String($0.matched),
                     $0.importedAt, $0.importedBy]
                }
                print(TextTable.render(rows), terminator: "")
            }
        }
    }
}

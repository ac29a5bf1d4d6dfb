#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Logging
import Tracker

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply the schema migrations the database lacks (safe to run twice, and concurrently).",
        discussion: """
            The migrations are the numbered files of sql/, built into the binary. In a database with the citus \
            extension and workers, it then distributes the log over the workers, empty or not, in steps that a rerun \
            continues after an interruption (docs/OPERATIONS.md, "On Citus").
            """)

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = makeLogger()
        let pool = try database.pool(logger: logger)
        defer { pool.close() }
        // The command prints each applied migration itself; the migrator's own lines would say
        // it a second time (as a log line).
        var quiet = logger
        quiet.logLevel = max(logger.logLevel, .warning)
        // Each step's line as it is done (stdout to a pipe or a file is otherwise written at
        // exit): an operator watching a long distribution sees where it is, and what an
        // interrupted run had finished.
        let applied = try await Migrator(logger: quiet, report: { print($0); fflush(nil) }).migrate(pool)
        if applied.isEmpty {
            print("schema is current (\(Migration.all.count) migrations)")
        } else {
            for m in applied {
                if m == Migration.citusLayout {
                    print("distributed the log over the Citus cluster (docs/SCALING.md, \"Citus\")")
                } else {
                    print("applied \(paddedVersion(m.version))_\(m.name)")
                }
            }
        }
    }
}

func paddedVersion(_ value: Int) -> String {
    let s = String(value)
    return String(repeating: "0", count: max(0, 3 - s.count)) + s
}

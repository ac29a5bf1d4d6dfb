#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Foundation

/// `tracker` and its subcommands; the `TrackerMain` executable runs `main()`.
public struct TrackerCommand: AsyncParsableCommand {
    /// The tracker's version, written here only: `tracker --version` prints it, and the OpenAPI
    /// document's `info.version`, the container image's tag and CHANGELOG.md's newest release
    /// repeat it (`VersionTests` fails while one of them differs).
    public static let version = "0.9.0"

    public static let configuration = CommandConfiguration(
        commandName: "tracker",
        abstract: "Records native-ad impression, click and AdChoices events and reports on them.",
        discussion: """
            Configuration comes from flags, then the environment (DATABASE_URL, TRACKER_HOST, \
            TRACKER_PORT, …), then defaults. Run 'tracker help <command>' for one command.
            """,
        version: version,
        subcommands: [ServeCommand.self, MigrateCommand.self, RolesCommand.self, KeysCommand.self, BeaconCommand.self, ProjectCommand.self, RebuildCommand.self, ReportCommand.self, ExplainCommand.self, IVTCommand.self, ReconcileCommand.self, RetentionCommand.self])

    public init() {}

    public static func main() async {
        limitMallocArenas()
        var command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            exit(withError: error)
        }
        do {
            try bootstrapLogging(for: command)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // A usage error found while running shows the usage of the command that ran, not
            // the whole tool's.
            guard error is ValidationError else { exit(withError: error) }
            let name = usageString(for: type(of: command)).split(separator: " ").dropFirst().prefix(while: { !$0.hasPrefix("<") && !$0.hasPrefix("[") })
            writeToStandardError("Error: \(message(for: error))\nUsage: \(usageString(for: type(of: command)))\n"
                                 + "  See 'tracker help \(name.joined(separator: " "))' for more information.\n")
            Foundation.exit(exitCode(for: error).rawValue)
        }
    }
}

/// glibc gives every thread that allocates its own malloc arena, each keeping freed memory
/// for reuse; with NIO's and the pool's threads that multiplies the resident set for no
/// speed we could measure. Two arenas keep the server's memory flat under load.
func limitMallocArenas() {
    #if canImport(Glibc)
    let arenaMax: Int32 = -8  // M_ARENA_MAX in <malloc.h>, which the Glibc module does not import
    _ = glibcMallopt(arenaMax, 2)
    #endif
}

#if canImport(Glibc)
@_silgen_name("mallopt")
private func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32
#endif

import ArgumentParser

@main
struct TrackerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tracker",
        abstract: "Records native-ad impression, click and AdChoices events and reports on them.",
        discussion: """
            Configuration comes from flags, then the environment (DATABASE_URL, TRACKER_HOST, \
            TRACKER_PORT, …), then defaults. Run 'tracker help <command>' for one command.
            """,
        subcommands: [ServeCommand.self, MigrateCommand.self, KeysCommand.self, ProjectCommand.self, RebuildCommand.self, ReportCommand.self, RetentionCommand.self])

    static func main() async {
        bootstrapLogging()
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}

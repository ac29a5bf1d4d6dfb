import ArgumentParser
import Tracker

struct RetentionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention",
        abstract: "Drop daily partitions of the event log older than the kept days (reports keep their counts).",
        discussion: """
            Keeps today's partition and the N UTC days before it (days of received_at). A partition \
            is dropped only when the projector has read all of it; its event ids are forgotten with it, \
            so a retry of an event older than the kept log is stored in the log again (the projections \
            still know its id and do not count it twice). The projections are kept, so reports of \
            dropped days do not change; 'tracker rebuild' replays only the kept \
            log. Every drop is recorded in the retention_runs table. Safe to run from cron while the \
            server runs.
            """)

    @Option(name: .customLong("keep-days"), help: "Days kept before today (at least 1).")
    var keepDays: Int

    @Flag(name: .customLong("dry-run"), help: "Print what would be dropped; change nothing.")
    var dryRun = false

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = makeLogger()
        let pool = try database.pool(logger: logger)
        defer { pool.close() }
        let decisions: [RetentionDecision]
        do {
            decisions = try await Retention(pool: pool, logger: logger).run(keepDays: keepDays, dryRun: dryRun)
        } catch let error as RetentionError {
            throw ValidationError("--\(error.description)")  // the rule lives in Retention, once
        }
        if decisions.isEmpty {
            print("nothing to drop: no partition is older than \(keepDays) days")
            return
        }
        let rows = [["PARTITION", "DAY", "EVENTS", "ACTION"]] + decisions.map { d in
            [d.partition, d.day, String(d.events), Self.describe(d.action)]
        }
        print(TextTable.render(rows, rightAligned: [2]), terminator: "")
    }

    static func describe(_ action: RetentionDecision.Action) -> String {
        switch action {
        case .dropped(let ids): "dropped (\(ids) ids forgotten)"
        case .wouldDrop: "would drop (dry run)"
        case .keptUnprojected(let pending): "kept: \(pending) events not yet projected (run the projector, then retry)"
        case .keptBusy: "kept: the log was busy (a long query held it); retry later"
        }
    }
}

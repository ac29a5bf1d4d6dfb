#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ArgumentParser
import Logging
import ServiceLifecycle
import Synchronization
import Tracker
import UnixSignals

struct ProjectCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "project",
        abstract: "Run the projector alone (e.g. on another machine; then serve with TRACKER_PROJECTOR=off).",
        discussion: """
            Several projectors of the whole log take turns; none corrupts another. On a distributed log, \
            projectors of groups of its shards (--group) work at once. SIGTERM stops it between steps.
            """)

    @Flag(help: "Catch up with the log once, then exit.")
    var once = false

    @Option(help: ArgumentHelp("On a distributed log: project group K of N of its shards, at once with the other groups' projectors (default: TRACKER_PROJECTOR_GROUP, else the whole log).",
                               valueName: "K/N"))
    var group: String?

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = makeLogger()
        let pool = try database.pool(maxConnections: 2, logger: logger)
        defer { pool.close() }
        let group = try self.group.map { try Settings.projectorGroup($0, name: "--group") } ?? Settings.process.projectorGroup()
        let projector = Projector(pool: pool, attributionWindow: try Settings.process.attributionWindow(),
                                  batchSize: try Settings.process.projectorBatchSize(), group: group,
                                  status: ProjectorStatus(endsTheRun: true), logger: logger)
        if once {
            let n = try await projector.catchUp()
            print("projected \(n) events")
            return
        }
        let services = ServiceGroup(configuration: .init(services: [projector], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await services.run()
    }
}

struct RebuildCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebuild",
        abstract: "Replay the whole log into fresh projections and swap them in atomically.",
        discussion: """
            The server keeps serving reports from the current projections meanwhile. Needed after \
            changing TRACKER_ATTRIBUTION_WINDOW. Shows a progress bar when stderr is a terminal. \
            TRACKER_REBUILD_FILE_EVENTS (500000): log events per spill file; each core holds one \
            file's ads in memory at a time.
            """)

    @Flag(name: .customLong("discard-dropped-days"),
          help: "Rebuild even though retention dropped days of the log (their report rows become empty).")
    var discardDroppedDays = false

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = makeLogger()
        let pool = try database.pool(logger: logger)
        defer { pool.close() }
        let terminal = isatty(2) == 1
        let started = ContinuousClock.now
        // When each phase began, so the summary can say where the time went.
        let phases = Mutex<[(name: String, began: Duration)]>([])
        let rebuild = Rebuild(pool: pool, attributionWindow: try Settings.process.attributionWindow(),
                              eventsPerFile: try Settings.process.positiveInt("TRACKER_REBUILD_FILE_EVENTS") ?? Rebuild.defaultEventsPerFile, logger: logger)
        let total = try await rebuild.run(discardingDroppedDays: discardDroppedDays) { p in
            phases.withLock { if $0.last?.name != p.phase { $0.append((p.phase, p.elapsed)) } }
            if terminal { ProgressBar.draw(p) }
        }
        if terminal { writeToStandardError("\n") }
        let elapsed = ContinuousClock.now - started
        let seconds = elapsed.seconds
        print("rebuilt projections from \(total) events in \(String(format1: seconds)) s (\(Int(Double(total) / max(seconds, 0.001))) events/s)")
        let timeline = phases.withLock { $0 }
        let spans = timeline.indices.dropLast().map { i in
            "\(timeline[i].name) \(String(format1: (timeline[i + 1].began - timeline[i].began).seconds)) s"
        }
        print("phases: " + spans.joined(separator: ", "))
    }
}

enum ProgressBar {
    static func draw(_ p: RebuildProgress) {
        let seconds = p.elapsed.seconds
        let fraction = p.total > 0 ? min(1, Double(p.done) / Double(p.total)) : 1
        let width = 30
        let filled = Int(fraction * Double(width))
        let rate = seconds > 0 ? Double(p.done) / seconds : 0
        let eta = rate > 0 ? Double(p.total - p.done) / rate : 0
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        let line = "\r\(p.phase.padding(10)) [\(bar)] \(Int(fraction * 100))% \(p.done)/\(p.total) events  \(Int(rate)) ev/s  ETA \(Int(eta)) s   "
        writeToStandardError(line)
    }
}

extension String {
    func padding(_ width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }

    init(format1 value: Double) {
        let tenths = Int((value * 10).rounded())
        self = "\(tenths / 10).\(tenths % 10)"
    }
}

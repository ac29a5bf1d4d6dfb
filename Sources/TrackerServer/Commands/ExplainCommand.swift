import ArgumentParser
import Tracker

/// `tracker explain REQUEST_ID`: the ad's audit trail on the command line.
struct ExplainCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Show every stored event of one ad (one requestId) and what it became under the report rules (docs/PROTOCOL.md, section 5).",
        discussion: """
            The same as GET /v1/ads/{requestId}: each event in the order the rules take them (corrected \
            time, then id) with its times, source, adapter and asset key, and what it counts as: the \
            counted impression (stale or not), a duplicate and of which event, a click attributed to \
            which impression or unattributed and why, AdChoices, video, test traffic. Reads like \
            'tracker report' (REPORT_DATABASE_URL when set, waits up to TRACKER_REPORT_WAIT).
            """)

    enum Output: String, ExpressibleByArgument, CaseIterable {
        case table, json
    }

    @Argument(help: "The ad's requestId.")
    var requestId: String

    @Flag(name: .customLong("include-test"), help: "Judge test events too (as a report with --include-test).")
    var includeTest = false

    @Option(help: "table or json.")
    var output: Output = .table

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let pool = try database.reportPool()
        defer { pool.close() }
        guard let (explanation, lag) = try await AdAudit(pool: pool, maxWait: try Settings.process.reportWait())
            .explain(requestId: requestId, includeTest: includeTest) else {
            throw CommandFailure("no stored event has the requestId '\(requestId)' (or the projector has not reached it yet)")
        }
        if lag.events > 0 {
            writeToStandardError("note: the projections trail the log by \(lag.events) event(s), \(lag.seconds) s\n")
        }
        switch output {
        case .json: print(explanation.json)
        case .table: print(Self.table(explanation), terminator: "")
        }
    }

    static func table(_ x: AdExplanation) -> String {
        var rows = [["corrected time", "id", "type", "source", "adapter", "asset", "received", "sent", "occurred", "outcome"]]
        for e in x.events {
            rows.append([e.event.correctedAt.rfc3339, e.event.id.text, e.event.type.rawValue, e.event.source.rawValue,
                         e.event.adapter ?? "-", e.event.assetKey ?? "-", e.receivedAt?.rfc3339 ?? "(dropped)",
                         e.sentAt?.rfc3339 ?? "-", e.occurredAt?.rfc3339 ?? "(dropped)", e.summary])
        }
        var out = "ad \(x.requestId): \(x.events.count) event(s), counted impression \(x.countedImpression?.text ?? "none")"
        if x.doubleTrackedImpressions { out += ", impressions double-tracked" }
        if x.doubleTrackedClicks { out += ", clicks double-tracked" }
        out += "; attribution window \(x.attributionWindow.components.seconds) s" + (x.includeTest ? ", test traffic included" : "") + "\n"
        return out + TextTable.render(rows)
    }
}

import ArgumentParser
import Tracker

/// `tracker explain REQUEST_ID` and `tracker explain --load LOAD_ID`: an ad's or a load's audit
/// trail on the command line.
struct ExplainCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Show every stored event of one ad (one requestId), or of one load (--load), and what it became under the report rules.",
        discussion: """
            The same as GET /v1/ads/{requestId}: each event in the order the rules take them (corrected \
            time, then id) with its times, source, adapter and asset key, and what it counts as: the \
            counted impression (stale or not), a duplicate and of which event, a click attributed to \
            which impression or unattributed and why, AdChoices, video, test traffic; then the trails \
            of the loads its ad_loaded events name. With --load, the same as GET /v1/loads/{loadId}: \
            the load's ad_request, ad_failed and mediation_result events and the ad_loaded events that \
            name it, and what became of the load (filled, failed, unanswered). Reads like \
            'tracker report' (REPORT_DATABASE_URL when set, waits up to TRACKER_REPORT_WAIT).
            """)

    enum Output: String, ExpressibleByArgument, CaseIterable {
        case table, json
    }

    @Argument(help: "The ad's requestId (omit with --load).")
    var requestId: String?

    @Option(name: .customLong("load"), help: "A load's loadId: explain the load instead of an ad.")
    var loadId: String?

    @Flag(name: .customLong("include-test"), help: "Judge test events too (as a report with --include-test).")
    var includeTest = false

    @Option(help: "table or json.")
    var output: Output = .table

    @OptionGroup var database: DatabaseOptions

    func validate() throws {
        switch (requestId, loadId) {
        case (nil, nil): throw ValidationError("name an ad (REQUEST_ID) or a load (--load LOAD_ID)")
        case (_?, _?): throw ValidationError("name either an ad (REQUEST_ID) or a load (--load LOAD_ID), not both")
        default: break
        }
    }

    func run() async throws {
        let pool = try database.reportPool()
        defer { pool.close() }
        let audit = AdAudit(pool: pool, maxWait: try Settings.process.reportWait())
        let json: String, table: String, lag: ProjectionLag
        if let loadId {
            guard let (explanation, l) = try await audit.explain(loadId: loadId, includeTest: includeTest) else {
                throw CommandFailure("no stored event has the loadId '\(loadId)' (or the projector has not reached it yet)")
            }
            (json, table, lag) = (explanation.json, Self.table(explanation), l)
        } else {
            let requestId = requestId ?? ""
            guard let (explanation, l) = try await audit.explain(requestId: requestId, includeTest: includeTest) else {
                throw CommandFailure("no stored event has the requestId '\(requestId)' (or the projector has not reached it yet)")
            }
            (json, table, lag) = (explanation.json, Self.table(explanation), l)
        }
        if lag.events > 0 {
            writeToStandardError("note: the projections trail the log by \(lag.events) event(s), \(lag.seconds) s\n")
        }
        switch output {
        case .json: print(json)
        case .table: print(table, terminator: "")
        }
    }

    static func table(_ x: AdExplanation) -> String {
        var out = "ad \(x.requestId): \(x.events.count) event(s), counted impression \(x.countedImpression?.text ?? "none")"
        if x.doubleTrackedImpressions { out += ", impressions double-tracked" }
        if x.doubleTrackedClicks { out += ", clicks double-tracked" }
        out += "; attribution window \(x.attributionWindow.components.seconds) s" + (x.includeTest ? ", test traffic included" : "") + "\n"
        out += events(x.events)
        for load in x.loads { out += "\n" + table(load) }
        return out
    }

    static func table(_ x: LoadExplanation) -> String {
        let outcome: String = switch x.outcome {
        case nil: "not requested (no ad_request)"
        case .failed(let code)?: "failed (\(code.rawValue))"
        case let other?: other.name
        }
        return "load \(x.loadId): \(x.events.count) event(s), \(outcome)" + (x.includeTest ? ", test traffic included" : "") + "\n"
            + events(x.events)
    }

    private static func events(_ events: [ExplainedEvent]) -> String {
        var rows = [["corrected time", "id", "type", "source", "adapter", "asset", "received", "sent", "occurred", "outcome"]]
        for e in events {
            rows.append([e.event.correctedAt.rfc3339, e.event.id.text, e.event.type.rawValue, e.event.source.rawValue,
                         e.event.adapter ?? "-", e.event.assetKey ?? "-", e.receivedAt?.rfc3339 ?? "(dropped)",
                         e.sentAt?.rfc3339 ?? "-", e.occurredAt?.rfc3339 ?? "(dropped)", e.summary])
        }
        return TextTable.render(rows)
    }
}

import ArgumentParser
import Foundation
import Tracker

/// `tracker ivt activate FILE` and `tracker ivt show`: the invalid-traffic rule sets.
struct IVTCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ivt",
        abstract: "Activate and show general invalid traffic (GIVT) rule sets: bot user agents, data-center ranges, rate limits.",
        discussion: """
            A rule set labels events (never drops them): declared_bot (user agent pattern; app events are not judged \
            by the patterns the rule set exempts for them, beacons are judged by all), datacenter (IP range), \
            high_rate (more than maxEventsPerClientMinute events of one IP and user agent in a UTC minute), \
            excessive_clicks (an ad's clicks beyond maxClicksPerAd). Labelled events leave every measure; reports \
            count them apart (summary's givtImpressions and givtClicks, the ivt report). A new rule set applies to \
            the whole log with 'tracker rebuild'; until then projectors keep the one they use. See docs/REPORTS.md.
            """,
        subcommands: [Activate.self, Show.self])

    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store a rule set (JSON) as the next version; 'tracker rebuild' applies it to projections that hold events.",
            discussion: """
                FILE is a JSON object with optional fields: name, userAgents ([{"pattern": "…", "name": "…"}]), \
                userAgentLists (files in the crawler-user-agents format, relative to FILE), appExemptions \
                ([{"pattern": "…", "reason": "…"}]: patterns of userAgents or the lists, exactly as written, that \
                events sent to POST /v1/events are not judged by; beacons still are), ipRanges (CIDR strings), \
                ipRangeFiles (one range a line, '#' comments), maxClicksPerAd, maxEventsPerClientMinute (positive \
                integers), sources (the files already read into a stored rule set; activation adds those it reads). \
                Lists are read now and stored with the rule set. An invalid pattern or range refuses the \
                whole rule set, naming it; nothing is stored then. Needs the owner's connection (tracker migrate's).
                """)

        @Argument(help: "The rule set, a JSON file.")
        var file: String

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let url = URL(fileURLWithPath: file)
            let directory = url.deletingLastPathComponent()
            let document: [UInt8]
            do {
                document = try Self.contents(of: url)
            } catch {
                throw CommandFailure("cannot read \(file): \(error)")
            }
            let ruleSet: IVTRuleSet
            do {
                ruleSet = try IVTRuleSet.parse(document) { name in
                    try Self.contents(of: name.hasPrefix("/") ? URL(fileURLWithPath: name) : directory.appendingPathComponent(name))
                }
            } catch {
                throw CommandFailure("\(file): \(error); nothing was activated")
            }
            let pool = try database.pool()
            defer { pool.close() }
            let sets = IVTRuleSets(pool: pool)
            let version = try await sets.activate(ruleSet)
            let exempted = ruleSet.appExemptions.isEmpty ? "" : " (\(ruleSet.patternIndices(for: .app).count) for app events)"
            print("activated rule set \(version)\(ruleSet.name.map { " (\($0))" } ?? ""): \(ruleSet.userAgents.count) user agent pattern(s)"
                  + "\(exempted), \(ruleSet.ipRanges.count) IP range(s), maxClicksPerAd \(ruleSet.maxClicksPerAd.map(String.init) ?? "off"), "
                  + "maxEventsPerClientMinute \(ruleSet.maxEventsPerClientMinute.map(String.init) ?? "off")")
            let versions = try await sets.versions()
            if versions.projectionsEmpty {
                print("the projections hold no event yet: the projector labels with rule set \(versions.newest) from its next step, no rebuild needed")
            } else {
                print("run 'tracker rebuild' to apply it to the whole log; until then the projections keep rule set \(versions.projections)")
            }
        }

        /// A file's bytes; a failure says in a few words what is wrong with which path (not
        /// Foundation's error dump).
        static func contents(of url: URL) throws(UnreadableFile) -> [UInt8] {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
                throw UnreadableFile(path: url.path, reason: "no such file")
            }
            guard !isDirectory.boolValue else { throw UnreadableFile(path: url.path, reason: "a directory, not a file") }
            guard FileManager.default.isReadableFile(atPath: url.path) else { throw UnreadableFile(path: url.path, reason: "permission denied") }
            do {
                return Array(try Data(contentsOf: url))
            } catch {
                throw UnreadableFile(path: url.path, reason: "reading it failed")
            }
        }
    }

    /// A file of a rule set that cannot be read: `no such file /srv/rules/bots.json`.
    struct UnreadableFile: Error, CustomStringConvertible {
        var path: String
        var reason: String
        var description: String { "\(reason): \(path)" }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the newest rule set, and which one the projections use.")

        enum Output: String, ExpressibleByArgument, CaseIterable {
            case summary, json
        }

        @Option(help: "summary (counts and limits) or json (the stored rule set, every pattern and range).")
        var output: Output = .summary

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            let pool = try database.reportPool()
            defer { pool.close() }
            let sets = IVTRuleSets(pool: pool)
            let newest = try await sets.newest()
            let versions = try await sets.versions()
            switch output {
            case .json:
                print(newest.version == 0 ? IVTRuleSet.empty.storedDocument : newest.ruleSet.storedDocument)
            case .summary:
                let r = newest.ruleSet
                var waits = ""
                if versions.newest > versions.projections {
                    waits = versions.projectionsEmpty ? ": they hold no event yet, the projector takes \(versions.newest) at its next step"
                        : ": run 'tracker rebuild' to apply \(versions.newest)"
                }
                var lines = [
                    "rule set \(newest.version)\(r.name.map { " (\($0))" } ?? ""), activated \(newest.activatedAt) by \(newest.activatedBy)",
                    "  user agent patterns       \(r.userAgents.count)"
                        + (r.appExemptions.isEmpty ? "" : ", \(r.patternIndices(for: .app).count) of them for app events"),
                    "  IP ranges                 \(r.ipRanges.count)",
                    "  maxClicksPerAd            \(r.maxClicksPerAd.map(String.init) ?? "off")",
                    "  maxEventsPerClientMinute  \(r.maxEventsPerClientMinute.map(String.init) ?? "off")",
                    "  lists read                \(r.sources.isEmpty ? "none" : r.sources.joined(separator: ", "))",
                    "  app exemptions            "
                        + (r.appExemptions.isEmpty ? "none" : "\(r.appExemptions.count): these patterns judge beacons, not events sent to POST /v1/events"),
                ]
                lines += Self.exemptionLines(r)
                lines.append("the projections use rule set \(versions.projections)\(waits)")
                print(lines.joined(separator: "\n"))
            }
        }

        /// One line per app exemption: the pattern, quoted, and why.
        static func exemptionLines(_ rules: IVTRuleSet) -> [String] {
            let quoted = rules.appExemptions.map { e in
                var q = ""
                JSONText.appendQuoted(e.pattern, to: &q)
                return (q, e.reason)
            }
            let width = quoted.map(\.0.count).max() ?? 0
            return quoted.map { q, reason in "    " + q + String(repeating: " ", count: width - q.count) + "  " + reason }
        }
    }
}

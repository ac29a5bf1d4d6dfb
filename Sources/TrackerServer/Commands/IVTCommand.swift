import ArgumentParser
import Foundation
import Tracker

/// `tracker ivt activate FILE` and `tracker ivt show`: the invalid-traffic rule sets.
struct IVTCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ivt",
        abstract: "Activate and show general invalid traffic (GIVT) rule sets: bot user agents, data-center ranges, rate limits.",
        discussion: """
            A rule set labels events (never drops them): declared_bot (user agent pattern), datacenter (IP range), \
            high_rate (more than maxEventsPerClientMinute events of one IP and user agent in a UTC minute), \
            excessive_clicks (an ad's clicks beyond maxClicksPerAd). Labelled events leave every measure; reports \
            count them apart (summary's givtImpressions and givtClicks, the ivt report). A new rule set applies to \
            the whole log with 'tracker rebuild'; until then projectors keep the one they use. See docs/REPORTS.md.
            """,
        subcommands: [Activate.self, Show.self])

    struct Activate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Store a rule set (JSON) as the next version; then run 'tracker rebuild' to apply it.",
            discussion: """
                FILE is a JSON object with optional fields: name, userAgents ([{"pattern": "…", "name": "…"}]), \
                userAgentLists (files in the crawler-user-agents format, relative to FILE), ipRanges (CIDR strings), \
                ipRangeFiles (one range a line, '#' comments), maxClicksPerAd, maxEventsPerClientMinute (positive \
                integers). Lists are read now and stored with the rule set. An invalid pattern or range refuses the \
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
                document = Array(try Data(contentsOf: url))
            } catch {
                throw CommandFailure("cannot read \(file): \(error.localizedDescription)")
            }
            let ruleSet: IVTRuleSet
            do {
                ruleSet = try IVTRuleSet.parse(document) { name in
                    let path = name.hasPrefix("/") ? URL(fileURLWithPath: name) : directory.appendingPathComponent(name)
                    return Array(try Data(contentsOf: path))
                }
            } catch {
                throw CommandFailure("\(file): \(error); nothing was activated")
            }
            let pool = try database.pool()
            defer { pool.close() }
            let version = try await IVTRuleSets(pool: pool).activate(ruleSet)
            print("activated rule set \(version)\(ruleSet.name.map { " (\($0))" } ?? ""): \(ruleSet.userAgents.count) user agent pattern(s), "
                  + "\(ruleSet.ipRanges.count) IP range(s), maxClicksPerAd \(ruleSet.maxClicksPerAd.map(String.init) ?? "off"), "
                  + "maxEventsPerClientMinute \(ruleSet.maxEventsPerClientMinute.map(String.init) ?? "off")")
            print("run 'tracker rebuild' to apply it to the whole log; until then the projections keep the rule set they use")
        }
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
                print("""
                    rule set \(newest.version)\(r.name.map { " (\($0))" } ?? ""), activated \(newest.activatedAt) by \(newest.activatedBy)
                      user agent patterns       \(r.userAgents.count)
                      IP ranges                 \(r.ipRanges.count)
                      maxClicksPerAd            \(r.maxClicksPerAd.map(String.init) ?? "off")
                      maxEventsPerClientMinute  \(r.maxEventsPerClientMinute.map(String.init) ?? "off")
                      lists read                \(r.sources.isEmpty ? "none" : r.sources.joined(separator: ", "))
                    the projections use rule set \(versions.projections)\(versions.newest > versions.projections ? ": run 'tracker rebuild' to apply \(versions.newest)" : "")
                    """)
            }
        }
    }
}

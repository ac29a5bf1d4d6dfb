import ArgumentParser
import Tracker

struct BeaconCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "Web beacons: sign pixel and click URLs for ads rendered in a browser; list rejected ones.",
        subcommands: [Sign.self, Rejections.self])

    struct Sign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Mint a signed /v1/pixel.gif or /v1/click URL for one event (no database needed).",
            discussion: """
                Signs with TRACKER_BEACON_SECRET, which must equal the secret of the trackers that \
                receive the beacon. The event is checked by the rules of POST /v1/events; its time is \
                when the browser fetches the URL. A click or adchoices_click needs --destination, the \
                only URL /v1/click will redirect to. Example:
                  tracker beacon sign --type click --request-id req-7f3c --ad-unit /6499/site/native \\
                    --format-id 10063170 --asset-key MainImage --destination https://advertiser.example/landing \\
                    --base-url https://tracker.example.com
                """)

        @Option(help: "The event type: impression, click, adchoices_impression, adchoices_click, ad_loaded or a video_* type.")
        var type: String
        @Option(help: "The ad response's id (one loaded ad).")
        var requestId: String
        @Option(help: "The ad unit path, e.g. /6499/example/native.")
        var adUnit: String
        @Option(help: "The format: custom format ID (digits) or native, app_install, content.")
        var formatId: String
        @Option(help: "The clicked asset (required for click).")
        var assetKey: String?
        @Option(help: "custom_handler, deep_link or destination_url.")
        var clickAction: String?
        @Option(help: "app (default), sdk or mediation.")
        var source: String?
        @Option(help: "The mediation adapter / network name.")
        var adapter: String?
        @Flag(help: "Served in the EEA.")
        var eea = false
        @Flag(help: "Direct-sold (reservation) rather than backfill.")
        var reservation = false
        @Flag(help: "A test request (left out of reports unless they include test traffic).")
        var test = false
        @Option(name: .customLong("attribute"), help: "key=value, a string attribute; repeat for more.")
        var attributes: [String] = []
        @Option(help: "The event id (a UUID); default: a new UUIDv7. Reloads of the URL are duplicates of this id.")
        var id: String?
        @Option(help: "Where /v1/click redirects (click and adchoices_click only): an absolute http(s) URL.")
        var destination: String?
        @Option(help: "Seconds the URL records events (default 86400, at most 2592000); later clicks still redirect.")
        var expiresIn: Int64?
        @Option(help: "Stored as the event's key name, as beacon:<issuer>.")
        var issuer: String = "cli"
        @Option(help: "The tracker's public origin, e.g. https://tracker.example.com; without it the path is printed.")
        var baseURL: String?
        @Option(help: "url (default), html (an <img> or <a> tag) or json.")
        var output: Output = .url

        enum Output: String, ExpressibleByArgument, CaseIterable {
            case url, html, json
        }

        func run() async throws {
            guard let secrets = try Settings.process.beaconSecrets() else {
                throw CommandFailure("TRACKER_BEACON_SECRET is not set: export the secret of the trackers that receive the beacons (make one with: openssl rand -base64 32)")
            }
            var event: [(key: String, value: JSONValue)] = []
            if let id { event.append(("id", .string(id))) }
            event += [("type", .string(type)), ("requestId", .string(requestId)), ("adUnit", .string(adUnit)), ("formatId", .string(formatId))]
            for (key, value) in [("assetKey", assetKey), ("clickAction", clickAction), ("source", source), ("adapter", adapter)] {
                if let value { event.append((key, .string(value))) }
            }
            for (key, on) in [("eea", eea), ("reservation", reservation), ("test", test)] where on {
                event.append((key, .bool(true)))
            }
            if !attributes.isEmpty {
                var pairs: [(key: String, value: JSONValue)] = []
                for attribute in attributes {
                    guard let equals = attribute.firstIndex(of: "="), equals != attribute.startIndex else {
                        throw ValidationError("--attribute must be key=value, got '\(attribute)'")
                    }
                    pairs.append((String(attribute[..<equals]), .string(String(attribute[attribute.index(after: equals)...]))))
                }
                event.append(("attributes", .object(pairs)))
            }
            let beacon: MintedBeacon
            do {
                beacon = try Beacons(secrets: secrets).mint(
                    BeaconOrder(event: .object(event), destination: destination, expiresInSeconds: expiresIn),
                    issuer: issuer, now: .now())
            } catch {
                throw CommandFailure(error.description)
            }
            let base = baseURL.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? ""
            let url = base + beacon.path
            switch output {
            case .url:
                print(url)
            case .html:
                if beacon.type == .click || beacon.type == .adchoicesClick {
                    print("<a href=\"\(url)\" rel=\"sponsored noopener\">…</a>")
                } else {
                    print("<img src=\"\(url)\" width=\"1\" height=\"1\" alt=\"\" style=\"position:absolute\">")
                }
            case .json:
                print(String(decoding: try JSONBody.data(MintedBeaconJSON(beacon, url: url)), as: UTF8.self))
            }
        }
    }

    struct Rejections: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List authentic beacons that were not recorded (expired, or invalid), newest first.")

        @Option(help: "How many rows (default 50).")
        var limit: Int = 50

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            guard limit > 0 else { throw ValidationError("--limit must be a positive integer, got \(limit)") }
            let pool = try database.pool()
            defer { pool.close() }
            let rows = try await BeaconRejections(pool: pool).latest(limit: limit)
            let table = [["EVENT ID", "TYPE", "REQUEST ID", "REASON", "ATTEMPTS", "LAST RECEIVED", "MESSAGE"]]
                + rows.map { [$0.eventId, $0.type, $0.requestId, $0.reason, String($0.attempts), $0.lastReceivedAt, $0.message] }
            print(TextTable.render(table), terminator: "")
        }
    }
}

import Foundation
import Testing
import Tracker

/// Keys scoped to networks (PROTOCOL.md 11): over traffic of three networks, a key of two sees
/// exactly the rows an unscoped key sees for those two, and nothing of the third: no row, no
/// header, no audit trail, no import; and it sends events for its own networks only.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct NetworkScopeTests {
    static let networks = ["111", "222", "333"]
    static let scope = NetworkScope(codes: ["111", "222"])!

    /// Random traffic (ads, loads, waterfalls, test events), each ad and load moved to one of
    /// the three networks' ad units.
    static func traffic(seed: UInt64 = 7) -> [TrackingEvent] {
        var g = SeededGenerator(seed: seed)
        let events = RandomTraffic.events(ads: 90, using: &g)
        var unitOf: [String: String] = [:]
        for key in Set(events.map(\.logKey)).sorted() {
            unitOf[key] = "/\(networks.randomElement(using: &g)!)/site/native"
        }
        // An ad_loaded keeps its load's network: an ad and its load belong to one network.
        return events.map { e in
            let unit = e.type == .adLoaded ? (e.loadId.flatMap { unitOf[$0] } ?? unitOf[e.logKey]!) : unitOf[e.logKey]!
            return moved(e, to: e.adUnit.hasPrefix("/6499/example") ? "/\(NetworkScope.network(of: unit))/example/native" : unit)
        }
    }

    /// `e` with another ad unit.
    static func moved(_ e: TrackingEvent, to adUnit: String) -> TrackingEvent {
        TrackingEvent(id: e.id, type: e.type, requestId: e.requestId, adUnit: adUnit, formatId: e.formatId, assetKey: e.assetKey,
                      clickAction: e.clickAction, source: e.source, adapter: e.adapter, eea: e.eea, reservation: e.reservation,
                      test: e.test, attributes: e.attributes, occurredAt: e.occurredAt, sentAt: e.sentAt, receivedAt: e.receivedAt,
                      correctedAt: e.correctedAt, loadId: e.loadId, adsRequested: e.adsRequested, latencyMs: e.latencyMs,
                      errorCode: e.errorCode, result: e.result, position: e.position)
    }

    static func createKey(_ db: TestDatabase, _ name: String, _ scope: KeyScope, networks: NetworkScope?) async throws -> String {
        try await APIKeys(pool: db.pool).create(name: name, scope: scope, networks: networks)
    }

    static func rows(_ response: HTTPClient.Response) -> [[String: Any]] {
        (response.json["rows"] as? [[String: Any]]) ?? []
    }

    static func network(_ row: [String: Any]) -> String {
        NetworkScope.network(of: row["adUnit"] as? String ?? "").description
    }

    @Test func everyReportShowsAScopedKeyTheUnscopedRowsOfItsNetworksOnly() async throws {
        try await withTestDatabase { db in
            let events = Self.traffic()
            try await db.append(events)
            try await db.projector().catchUp()
            let all = try await db.createKey("all", scope: .report)
            let scoped = try await Self.createKey(db, "two", .report, networks: Self.scope)
            try await withInProcessTracker(db) { tracker in
                let from = Events.day0.adding(days: -1), to = Events.day0.adding(days: 6)
                var compared = 0
                for kind in ReportKind.allCases {
                    // adUnitLevel rolls ad units up within their network (the code is kept): a rolled-up
                    // row is one network's, as a row is.
                    for extra in ["", "&tz=America/New_York&granularity=hour", "&includeTest=true&tz=Asia/Kolkata", "&adUnitLevel=1"] {
                        let path = "/v1/reports/\(kind.rawValue)?from=\(from)&to=\(to)\(extra)"
                        let unscoped = try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(all)"])
                        let mine = try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(scoped)"])
                        #expect(unscoped.status == 200 && mine.status == 200, "\(path): \(mine.text)")
                        let expected = Self.rows(unscoped).filter { Self.scope.contains(network: Self.network($0)) }
                        let got = Self.rows(mine)
                        #expect(got.count == expected.count, "\(path)")
                        #expect(NSArray(array: got).isEqual(to: expected), "\(path): the scoped rows are the unscoped key's rows of its networks")
                        #expect(!got.contains { Self.network($0) == "333" }, "\(path)")
                        compared += got.count
                        // Nothing else of the answer tells the third network's traffic.
                        for header in ["x-projection-lag-events", "x-projection-lag-seconds", "x-ivt-rules"] {
                            #expect(mine.headers[header] == unscoped.headers[header], "\(path): \(header) with the projections caught up")
                        }
                        let csv = try await tracker.request("GET", path + "&format=csv", headers: ["Authorization": "Bearer \(scoped)"]).text
                        #expect(!csv.contains("/333/"), "\(path) as CSV")
                    }
                }
                #expect(compared > 100, "the traffic gave every network rows")
                // An ad unit filter, or a prefix, outside the key's networks is a 403 naming the network.
                for filter in ["/333/site/native", "/333/", "/3334/site/native"] {
                    let r = try await tracker.request("GET", "/v1/reports/summary?from=\(from)&to=\(to)&adUnit=\(filter)",
                                                       headers: ["Authorization": "Bearer \(scoped)"])
                    #expect(r.status == 403, "\(filter): \(r.text)")
                    #expect(r.json["error"] as? String == "forbidden")
                    #expect((r.json["message"] as? String)?.contains("network \(NetworkScope.network(of: filter))") == true, "\(r.text)")
                }
                let own = try await tracker.request("GET", "/v1/reports/summary?from=\(from)&to=\(to)&adUnit=/111/",
                                                     headers: ["Authorization": "Bearer \(scoped)"])
                #expect(own.status == 200 && Self.rows(own).allSatisfy { Self.network($0) == "111" } && !Self.rows(own).isEmpty)
            }
        }
    }

    /// The lag a scoped key reads counts its own networks' events only.
    @Test func theLagOfAScopedKeyCountsItsNetworksOnly() async throws {
        try await withTestDatabase { db in
            let scoped = try await Self.createKey(db, "two", .report, networks: Self.scope)
            let all = try await db.createKey("all", scope: .report)
            try await db.append((0..<5).map { Events.make(.impression, ad: "secret-\($0)", at: Events.at(1, 10), adUnit: "/333/site/native") })
            try await withInProcessTracker(db, environment: ["TRACKER_PROJECTOR": "off", "TRACKER_REPORT_WAIT": "0"]) { tracker in
                let path = "/v1/reports/summary?from=\(Events.day0)&to=\(Events.day0.adding(days: 2))"
                let mine = try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(scoped)"])
                let unscoped = try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(all)"])
                #expect(unscoped.headers["x-projection-lag-events"] == "5")
                #expect(mine.headers["x-projection-lag-events"] == "0", "five events of another network wait, none of the key's")
                #expect(mine.headers["x-projection-lag-seconds"] == "0.0")
            }
        }
    }

    /// A scoped key guessing another network's ids learns what a made-up id tells: the same
    /// status and the same body, the id sent aside; for random keys and random ids.
    @Test func anotherNetworksAdsAndLoadsAnswerAsOnesThatDoNotExist() async throws {
        try await withTestDatabase { db in
            let events = Self.traffic(seed: 19)
            try await db.append(events)
            try await db.projector().catchUp()
            var g = SeededGenerator(seed: 23)
            // Each state's networks: an ad or load with an event of another network is another's.
            var networksOf: [String: Set<String>] = [:]
            for e in events {
                networksOf[e.logKey, default: []].insert(String(NetworkScope.network(of: e.adUnit)))
                if e.type == .adLoaded, let load = e.loadId { networksOf[load, default: []].insert(String(NetworkScope.network(of: e.adUnit))) }
            }
            let loads = Set(events.compactMap { $0.type.isLoadEvent ? $0.loadId : nil }).sorted()
            let ads = Set(events.compactMap(\.requestId)).sorted()
            var keys: [(String, NetworkScope)] = []
            for (i, codes) in [["111"], ["222"], ["333"], ["111", "333"], ["222", "333"]].enumerated() {
                let scope = NetworkScope(codes: codes)!
                keys.append((try await Self.createKey(db, "probe-\(i)", .report, networks: scope), scope))
            }
            // Random keys asking for random ids: stored ads and loads of every network, and made-up ones.
            var probes: [(key: String, scope: NetworkScope, route: String, id: String, visible: Bool, nobody: String)] = []
            for _ in 0..<120 {
                let (key, scope) = keys.randomElement(using: &g)!
                let isLoad = Bool.random(using: &g)
                let stored = (isLoad ? loads : ads).randomElement(using: &g)!
                let id = Int.random(in: 0..<4, using: &g) == 0 ? "made-up-\(g.next() % 1000)" : stored
                let visible = networksOf[id].map { $0.allSatisfy { scope.contains(network: $0) } } ?? false
                probes.append((key, scope, isLoad ? "/v1/loads/" : "/v1/ads/", id, visible, "nobody-\(g.next() % 1000)"))
            }
            let asked = probes
            #expect(asked.contains { $0.visible } && asked.contains { !$0.visible && !$0.id.hasPrefix("made-up") })
            try await withInProcessTracker(db) { tracker in
                func body(_ r: HTTPClient.Response, id: String) -> String { r.text.replacingOccurrences(of: id, with: "ID") }
                for p in asked {
                    let r = try await tracker.request("GET", p.route + p.id, headers: ["Authorization": "Bearer \(p.key)"])
                    if p.visible {
                        #expect(r.status == 200, "\(p.route)\(p.id) with \(p.scope): \(r.text)")
                        for other in ["111", "222", "333"] where !p.scope.contains(network: other) {
                            #expect(!r.text.contains("/\(other)/"), "\(p.route)\(p.id)")
                        }
                    } else {
                        let none = try await tracker.request("GET", p.route + p.nobody, headers: ["Authorization": "Bearer \(p.key)"])
                        #expect(r.status == 404 && none.status == 404, "\(p.route)\(p.id) with \(p.scope)")
                        #expect(body(r, id: p.id) == body(none, id: p.nobody), "\(p.route)\(p.id): \(r.text) / \(none.text)")
                        #expect(r.headers["x-projection-lag-events"] == nil && r.headers["x-ivt-rules"] == nil)
                    }
                }
            }
        }
    }

    /// The same for ad unit paths and import ids: random scoped keys asking random reports for
    /// stored and made-up paths (exact and prefixes) of every network, and for stored and made-up
    /// imports; another network's path answers as a made-up one of that network, another
    /// network's import as a made-up id, the path or id sent aside.
    @Test func anotherNetworksAdUnitsAndImportsAnswerAsOnesThatDoNotExist() async throws {
        try await withTestDatabase { db in
            try await db.append(Self.traffic(seed: 29))
            try await db.projector().catchUp()
            var created: [(String, NetworkScope)] = []
            for (i, codes) in [["111"], ["222"], ["333"], ["111", "333"], ["222", "333"]].enumerated() {
                let scope = NetworkScope(codes: codes)!
                created.append((try await Self.createKey(db, "probe-\(i)", .report, networks: scope), scope))
            }
            let keys = created
            try await withInProcessTracker(db) { tracker in
                var g = SeededGenerator(seed: 31)
                func get(_ path: String, _ key: String) async throws -> HTTPClient.Response {
                    try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(key)"])
                }
                // One import per network, each by a key of that network alone.
                var imports: [(id: String, network: String)] = []
                for (key, scope) in keys.prefix(3) {
                    let network = scope.codes[0]
                    let file = "Date,Ad unit,Ad server impressions,Ad server clicks\n\(Events.day0),/\(network)/site/native,10,1\n"
                    let r = try await tracker.request("POST", "/v1/reconciliations?tz=UTC",
                                                      headers: ["Authorization": "Bearer \(key)", "Content-Type": "text/csv"], body: Data(file.utf8))
                    imports.append((try #require(r.json["id"] as? String, "\(r.text)"), network))
                }
                let range = "from=\(Events.day0.adding(days: -1))&to=\(Events.day0.adding(days: 6))"
                for _ in 0..<80 {
                    let (key, scope) = keys.randomElement(using: &g)!
                    let network = Self.networks.randomElement(using: &g)!
                    let stored = ["/\(network)/site/native", "/\(network)/example/native", "/\(network)/", "/\(network)/site/"]
                    let path = Bool.random(using: &g) ? stored.randomElement(using: &g)! : "/\(network)/made-up-\(g.next() % 1000)/native"
                    let made = "/\(network)/nobody-\(g.next() % 1000)/" + (path.hasSuffix("/") ? "" : "native")
                    let report = "/v1/reports/\(ReportKind.allCases.randomElement(using: &g)!.rawValue)?\(range)"
                        + (Bool.random(using: &g) ? "&format=csv" : "") + "&adUnit="
                    let r = try await get(report + path, key), none = try await get(report + made, key)
                    if scope.contains(network: network) {
                        #expect(r.status == 200 && none.status == 200, "\(report)\(path) with \(scope): \(r.text)")
                    } else {
                        #expect(r.status == 403 && none.status == 403, "\(report)\(path) with \(scope): \(r.text)")
                        #expect(r.text.replacingOccurrences(of: path, with: "PATH") == none.text.replacingOccurrences(of: made, with: "PATH"),
                                "\(report)\(path): \(r.text) / \(none.text)")
                        #expect(r.headers["x-projection-lag-events"] == nil && r.headers["x-ivt-rules"] == nil)
                    }
                    let (id, owner) = imports.randomElement(using: &g)!
                    let madeId = String((0..<24).map { _ in "0123456789abcdef".randomElement(using: &g)! })
                    for route in ["/v1/reconciliations/", "/v1/reports/reconciliation?format=csv&import=", "/v1/reports/reconciliation?import="] {
                        let r = try await get(route + id, key), none = try await get(route + madeId, key)
                        #expect(none.status == 404, "\(route)\(madeId): \(none.text)")
                        if scope.contains(network: owner) {
                            #expect(r.status == 200, "\(route)\(id) with \(scope): \(r.text)")
                        } else {
                            #expect(r.status == 404, "\(route)\(id) with \(scope): \(r.text)")
                            #expect(r.text.replacingOccurrences(of: id, with: "ID") == none.text.replacingOccurrences(of: madeId, with: "ID"),
                                    "\(route)\(id): \(r.text) / \(none.text)")
                        }
                    }
                }
            }
        }
    }

    @Test func aScopedIngestKeySendsItsNetworksEventsAndRejectsOthersNamingTheField() async throws {
        try await withTestDatabase { db in
            let key = try await Self.createKey(db, "app-111", .ingest, networks: NetworkScope(codes: ["111"])!)
            try await withInProcessTracker(db) { tracker in
                let body = Wire.batch([Wire.event(requestId: "mine", adUnit: "/111/home/native"),
                                       Wire.event(requestId: "theirs", adUnit: "/333/home/native"),
                                       Wire.event(type: "ad_request", adUnit: "/3334/home/native", extra: ["loadId": "l-1", "requestId": NSNull()])])
                let r = try await tracker.postEvents(body, key: key)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.json["accepted"] as? Int == 1)
                let rejected = (r.json["rejected"] as? [[String: Any]]) ?? []
                #expect(rejected.map { $0["index"] as? Int } == [1, 2])
                #expect((rejected.first?["error"] as? String)?.contains("adUnit /333/home/native belongs to network 333, which is not one of this key's networks (111)") == true,
                        "\(r.text)")
                #expect(try await db.scalar("SELECT count(*) FROM events WHERE ad_unit LIKE '/333/%'") == "0")
            }
        }
    }

    /// A signed beacon records whatever its token says: a scoped ingest key minting one for another
    /// network's ad unit would write that network's numbers past the rule above.
    @Test func aScopedIngestKeyMintsBeaconsForItsNetworksOnly() async throws {
        try await withTestDatabase { db in
            let key = try await Self.createKey(db, "ads-111", .ingest, networks: NetworkScope(codes: ["111"])!)
            try await withInProcessTracker(db, environment: ["TRACKER_BEACON_SECRET": "scope-test-secret-0123456789abcdef"]) { tracker in
                func mint(_ adUnits: [String]) async throws -> HTTPClient.Response {
                    let beacons = adUnits.enumerated().map { i, unit in
                        #"{"event": {"type": "impression", "requestId": "b-\#(i)", "adUnit": "\#(unit)", "formatId": "native"}}"#
                    }
                    return try await tracker.request("POST", "/v1/beacons", headers: ["Authorization": "Bearer \(key)", "Content-Type": "application/json"],
                                                     body: Data(#"{"beacons": [\#(beacons.joined(separator: ","))]}"#.utf8))
                }
                let refused = try await mint(["/111/web/native", "/333/web/native"])
                #expect(refused.status == 400 && refused.json["error"] as? String == "invalid_beacon_request", "\(refused.text)")
                #expect((refused.json["message"] as? String)?.hasPrefix("beacons[1].event") == true, "\(refused.text)")
                #expect((refused.json["message"] as? String)?.contains("adUnit /333/web/native belongs to network 333") == true, "\(refused.text)")
                let mine = try await mint(["/111/web/native"])
                let path = try #require((mine.json["beacons"] as? [[String: Any]])?.first?["path"] as? String, "\(mine.text)")
                #expect(try await tracker.request("GET", path).status == 200)
                #expect(try await db.rows("SELECT ad_unit, key_name FROM events") == [["/111/web/native", "beacon:ads-111"]])
            }
        }
    }

    @Test func aScopedKeyImportsForItsNetworksAndSeesOnlyTheImportsOfKeysWithin() async throws {
        try await withTestDatabase { db in
            try await db.append([Events.make(.impression, ad: "a", at: Events.at(0, 10), adUnit: "/111/home/native"),
                                 Events.make(.impression, ad: "b", at: Events.at(0, 10), adUnit: "/333/home/native")])
            try await db.projector().catchUp()
            let all = try await db.createKey("all", scope: .report)
            let one = try await Self.createKey(db, "one", .report, networks: NetworkScope(codes: ["111"])!)
            let two = try await Self.createKey(db, "two", .report, networks: Self.scope)
            try await withInProcessTracker(db) { tracker in
                func post(_ csv: String, _ key: String) async throws -> HTTPClient.Response {
                    try await tracker.request("POST", "/v1/reconciliations?tz=UTC",
                                              headers: ["Authorization": "Bearer \(key)", "Content-Type": "text/csv"], body: Data(csv.utf8))
                }
                func list(_ key: String) async throws -> [String] {
                    let r = try await tracker.request("GET", "/v1/reconciliations", headers: ["Authorization": "Bearer \(key)"])
                    return ((r.json["imports"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String }
                }
                let header = "Date,Ad unit,Ad server impressions,Ad server clicks\n"
                let refused = try await post(header + "\(Events.day0),/111/home/native,1,0\n\(Events.day0),/333/home/native,1,0\n", one)
                #expect(refused.status == 400 && refused.text.contains("row 3"), "\(refused.text)")
                #expect(try await db.scalar("SELECT count(*) FROM reconciliation_imports") == "0", "nothing of the file was imported")
                // By code (the last segment), a scoped key's names match its networks' ad units only:
                // 'native' is /111/home/native for it, where /333/home/native would make it ambiguous.
                let mine = try await post(header + "\(Events.day0),native,1,0\n", one)
                #expect(mine.status == 200 && mine.json["matched"] as? Int == 1, "\(mine.text)")
                let id = try #require(mine.json["id"] as? String)
                let theirs = try await post(header + "\(Events.day0),/333/home/native,1,0\n", all)
                let hidden = try #require(theirs.json["id"] as? String)
                #expect(try await list(one) == [id])
                #expect(try await list(two) == [id], "a key of 111 and 222 sees the imports of a key of 111")
                #expect(Set(try await list(all)) == [id, hidden])
                for path in ["/v1/reconciliations/\(hidden)", "/v1/reports/reconciliation?import=\(hidden)"] {
                    let r = try await tracker.request("GET", path, headers: ["Authorization": "Bearer \(two)"])
                    #expect(r.status == 404, "\(path): \(r.text)")
                }
                let report = try await tracker.request("GET", "/v1/reports/reconciliation", headers: ["Authorization": "Bearer \(two)"])
                #expect(report.json["import"] as? String == id, "the latest import it may see")
                #expect(!report.text.contains("/333/"))
                // The reconciliation takes the adUnit filter of every report: outside the key's networks a 403.
                for filter in ["/333/home/native", "/333/"] {
                    let r = try await tracker.request("GET", "/v1/reports/reconciliation?adUnit=\(filter)", headers: ["Authorization": "Bearer \(two)"])
                    #expect(r.status == 403 && r.text.contains("belongs to network 333"), "\(filter): \(r.text)")
                }
                func units(_ query: String) async throws -> [String] {
                    let r = try await tracker.request("GET", "/v1/reports/reconciliation?import=\(hidden)" + query, headers: ["Authorization": "Bearer \(all)"])
                    return ((r.json["rows"] as? [[String: Any]]) ?? []).compactMap { $0["adUnit"] as? String }
                }
                #expect(try await units("") == ["/111/home/native", "/333/home/native"])
                #expect(try await units("&adUnit=/111/") == ["/111/home/native"], "the tracker's side is filtered")
                #expect(try await units("&adUnit=/333/home/native") == ["/333/home/native"], "Ad Manager's side is filtered")
                #expect(try await units("&adUnit=/333/home/other").isEmpty)
                #expect(try await units("&adUnit=/333/home").isEmpty, "without a trailing / a filter is one ad unit, not a prefix")
                #expect(try await units("&adUnit=/333/").count == 1, "a prefix keeps the ad units under it")
            }
        }
    }

    @Test func keysCreateTakesNetworksAndAMalformedListCreatesNothing() async throws {
        try await withTestDatabase { db in
            let (ok, out) = try await runTrackerToEnd(["keys", "create", "--name", "n", "--scope", "report", "--networks", "6499,21775744923",
                                                       "--database-url", db.url])
            #expect(ok == 0, "\(out)")
            for bad in ["", "64a9", "6499,,1", "123456789012345678901", " 6499"] {
                let (status, output) = try await runTrackerToEnd(["keys", "create", "--name", "bad", "--scope", "ingest", "--networks", bad,
                                                                  "--database-url", db.url])
                #expect(status != 0 && output.contains("networks"), "'\(bad)': \(output)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM api_keys") == "1")
            let (_, list) = try await runTrackerToEnd(["keys", "list", "--database-url", db.url])
            #expect(list.contains("NETWORKS") && list.contains("21775744923,6499"), "\(list)")
        }
    }
}

/// Text a client chooses reaches CSV as text a spreadsheet shows, never as a formula: every CSV
/// route and the command line put `'` before a cell that starts with `=`, `+`, `-`, `@`, a tab
/// or a carriage return; JSON keeps the text as sent.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct CSVFormulaTests {
    static let hostile = ["=HYPERLINK(\"http://evil.example\",\"x\")", "+SUM(1,2)", "@cmd", "-1+1", "=1+1", "\tTab", "\rReturn"]
    /// Text whose first character starts no formula: a spreadsheet shows it as text already, and
    /// the CSV keeps it as sent (a leading space before `=` included).
    static let harmless = [" =1+1", "'=2+2", "a=1+1"]

    /// The cells of a CSV body (RFC 4180: quoted fields may hold commas, quotes and line ends).
    static func cells(_ csv: String) -> [String] {
        var out: [String] = [], field = "", quoted = false, atStart = true
        var chars = Array(csv)[...]
        while let c = chars.popFirst() {
            if quoted {
                if c == "\"" {
                    if chars.first == "\"" { field.append("\""); chars.removeFirst() } else { quoted = false }
                } else { field.append(c) }
            } else if c == "\"", atStart {
                quoted = true
            } else if c == "," || c == "\n" {
                out.append(field)
                field = ""
                atStart = true
                continue
            } else {
                field.append(c)
            }
            atStart = false
        }
        return out
    }

    @Test func everyCSVRouteAndTheCommandLineWriteFormulasAsText() async throws {
        try await withTestDatabase { db in
            var events: [TrackingEvent] = []
            for (i, text) in (Self.hostile + Self.harmless).enumerated() {
                let at = Events.at(1, 10, i)
                events.append(Events.make(.impression, ad: "h\(i)", at: at, source: .mediation, adapter: text))
                events.append(Events.make(.click, ad: "h\(i)", at: at + .seconds(2), asset: text))
                events.append(Events.load(.mediationResult, "l\(i)", at: at, latencyMs: 50, result: .loaded, adapter: text, position: 1))
            }
            try await db.append(events)
            try await db.projector().catchUp()
            let key = try await db.createKey("r", scope: .report)
            let range = "from=\(Events.day0)&to=\(Events.day0.adding(days: 2))"
            try await withInProcessTracker(db) { tracker in
                var seen = Set<String>()
                for kind in ReportKind.allCases {
                    for extra in ["", "&tz=America/New_York&granularity=hour"] {
                        let csv = try await tracker.request("GET", "/v1/reports/\(kind.rawValue)?\(range)&format=csv\(extra)",
                                                             headers: ["Authorization": "Bearer \(key)"]).text
                        for cell in Self.cells(csv) {
                            #expect(!(cell.first.map { "=+-@\t\r".contains($0) } ?? false), "\(kind)\(extra): a cell starts a formula: \(cell)")
                            if cell.hasPrefix("'"), !Self.harmless.contains(cell) { seen.insert(String(cell.dropFirst())) }
                        }
                        if [ReportKind.assets, .sources, .waterfall].contains(kind), extra.isEmpty {
                            let cells = Self.cells(csv)
                            #expect(Self.harmless.allSatisfy { cells.contains($0) }, "\(kind)\(extra): harmless text as sent: \(csv)")
                        }
                    }
                }
                #expect(seen == Set(Self.hostile), "each hostile text came back guarded: \(seen)")
                let json = try await tracker.request("GET", "/v1/reports/assets?\(range)", headers: ["Authorization": "Bearer \(key)"]).json
                let keys = Set(((json["rows"] as? [[String: Any]]) ?? []).compactMap { $0["assetKey"] as? String })
                #expect(keys == Set(Self.hostile + Self.harmless), "JSON keeps the text as sent")
                // The reconciliation's CSV: its numbers stay numbers (a negative discrepancy is not a formula).
                let file = "Date,Ad unit,Ad server impressions,Ad server clicks\n\(Events.day0),/1234/home/native,100,1\n"
                #expect(try await tracker.request("POST", "/v1/reconciliations?tz=UTC",
                                                   headers: ["Authorization": "Bearer \(key)", "Content-Type": "text/csv"],
                                                   body: Data(file.utf8)).status == 200)
                let reconciliation = try await tracker.request("GET", "/v1/reports/reconciliation?format=csv",
                                                                headers: ["Authorization": "Bearer \(key)"]).text
                #expect(reconciliation.contains(",-0.9,"), "\(reconciliation)")
            }
            let (status, cli) = try await runTrackerToEnd(["report", "assets", "--from", Events.day0.description, "--to",
                                                           Events.day0.adding(days: 2).description, "--output", "csv", "--database-url", db.url])
            #expect(status == 0, "\(cli)")
            #expect(cli.contains("'+SUM(1,2)") && cli.contains("\"'=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")\""), "\(cli)")
        }
    }
}

import Foundation
import Testing
import Tracker

/// The secret every beacon test tracker signs with, and one no tracker here knows.
private let secret = "beacon-test-secret-0123456789abcdef"
private let strangerSecret = "someone-elses-secret-0123456789abcdef"
private let landing = "https://advertiser.example/landing?utm_source=tracker&x=1"

/// What a browser would do with a beacon URL: a GET of the path, no key, no redirects followed.
private func fetch(_ tracker: some TrackerHTTP, _ path: String) async throws -> HTTPClient.Response {
    try await tracker.request("GET", path)
}

/// `tracker beacon sign …` with `secret`; the printed path (no --base-url).
private func sign(_ arguments: [String], secret: String = secret) async throws -> String {
    let run = try await runTrackerCommand(["beacon", "sign"] + arguments, environment: ["TRACKER_BEACON_SECRET": secret])
    try #require(run.status == 0, "tracker beacon sign failed: \(run.output)")
    return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

private func impressionArguments(_ requestId: String, _ extra: [String] = []) -> [String] {
    ["--type", "impression", "--request-id", requestId, "--ad-unit", "/4242/web/native", "--format-id", "10063170"] + extra
}

private func clickArguments(_ requestId: String, _ extra: [String] = []) -> [String] {
    ["--type", "click", "--request-id", requestId, "--ad-unit", "/4242/web/native", "--format-id", "10063170",
     "--asset-key", "MainImage", "--destination", landing] + extra
}

/// The claims JSON inside a token, and the token with the claims changed but the signature kept.
private enum Forge {
    static func claims(of path: String) -> String {
        let token = String(path.split(separator: "=", maxSplits: 1)[1])
        return String(decoding: decode(String(token.split(separator: ".")[0])), as: UTF8.self)
    }

    static func replacing(_ path: String, _ from: String, with to: String) -> String {
        let (route, token) = { let p = path.split(separator: "=", maxSplits: 1); return (String(p[0]), String(p[1])) }()
        let parts = token.split(separator: ".")
        let claims = String(decoding: decode(String(parts[0])), as: UTF8.self)
        precondition(claims.contains(from), "\(from) is not in \(claims)")
        let forged = claims.replacingOccurrences(of: from, with: to)
        return route + "=" + encode(Data(forged.utf8)) + "." + parts[1]
    }

    static func decode(_ text: String) -> Data {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return Data(base64Encoded: s) ?? Data()
    }

    static func encode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// Headers every beacon answer carries, refusals included.
private func expectBeaconHeaders(_ r: HTTPClient.Response, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(r.headers["cache-control"] == "no-store, no-cache, must-revalidate, private", sourceLocation: sourceLocation)
    #expect(r.headers["pragma"] == "no-cache", sourceLocation: sourceLocation)
    #expect(r.headers["expires"] == "0", sourceLocation: sourceLocation)
    #expect(r.headers["x-content-type-options"] == "nosniff", sourceLocation: sourceLocation)
    #expect(r.headers["referrer-policy"] == "no-referrer", sourceLocation: sourceLocation)
    #expect(r.headers["set-cookie"] == nil, "no cookies", sourceLocation: sourceLocation)
}

private func today() -> String {
    let f = DateFormatter()
    f.dateFormat = "yyyy-MM-dd"
    f.timeZone = TimeZone(identifier: "UTC")
    return f.string(from: Date())
}

/// The summary rows of the beacon ad unit for today, once the projector caught up.
private func summary(_ tracker: some TrackerHTTP, key: String) async throws -> [String: Int] {
    try await waitUntilCaughtUp(tracker)
    let r = try await tracker.request("GET", "/v1/reports/summary?from=\(today())&to=\(today())&adUnit=/4242/web/native",
                                       headers: ["Authorization": "Bearer \(key)"])
    #expect(r.status == 200, "\(r.text)")
    var totals: [String: Int] = [:]
    for row in r.json["rows"] as? [[String: Any]] ?? [] {
        for (k, v) in row { if let n = v as? Int { totals[k, default: 0] += n } }
    }
    return totals
}

@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct BeaconTests {
    let environment = ["TRACKER_BEACON_SECRET": secret]

    @Test func aPixelAndAClickAreRecordedOnceHoweverOftenTheyAreReloadedAndTheReportCountsThem() async throws {
        try await withTestDatabase { db in
            let report = try await db.createKey("reader", scope: .report)
            try await withInProcessTracker(db, environment: environment) { tracker in
                let pixel = try await sign(impressionArguments("web-1"))
                #expect(pixel.hasPrefix("/v1/pixel.gif?t="))
                let first = try await fetch(tracker, pixel)
                #expect(first.status == 200)
                #expect(first.headers["content-type"] == "image/gif")
                #expect(first.body.count == 43 && first.body.starts(with: Data("GIF89a".utf8)), "a 1×1 GIF")
                #expect(first.headers["x-beacon-outcome"] == "recorded")
                expectBeaconHeaders(first)
                let reload = try await fetch(tracker, pixel)
                #expect(reload.status == 200 && reload.body == first.body)
                #expect(reload.headers["x-beacon-outcome"] == "duplicate")

                let click = try await sign(clickArguments("web-1"))
                for attempt in 0..<3 {
                    let r = try await fetch(tracker, click)
                    #expect(r.status == 302)
                    #expect(r.headers["location"] == landing, "exactly the signed destination")
                    #expect(r.headers["x-beacon-outcome"] == (attempt == 0 ? "recorded" : "duplicate"))
                    #expect(r.body.isEmpty)
                    expectBeaconHeaders(r)
                }

                let rows = try await db.rows("""
                    SELECT type, request_id, asset_key, key_name, source, sent_at IS NULL,
                           occurred_at = received_at AND corrected_at = received_at
                    FROM events ORDER BY type
                    """)
                #expect(rows == [["impression", "web-1", nil, "beacon:cli", "app", "t", "t"],
                                 ["click", "web-1", "MainImage", "beacon:cli", "app", "t", "t"]])
                let totals = try await summary(tracker, key: report)
                #expect(totals["impressions"] == 1 && totals["duplicateImpressions"] == 0, "a reload is the same event, not a second impression: \(totals)")
                #expect(totals["clicks"] == 1 && totals["attributedClicks"] == 1 && totals["duplicateClicks"] == 0, "\(totals)")
            }
        }
    }

    @Test func adServersMintBeaconsWithAnIngestKey() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("ad-server", scope: .ingest)
            let report = try await db.createKey("reader", scope: .report)
            try await withInProcessTracker(db, environment: environment) { tracker in
                func mint(_ body: String, key: String?, contentType: String = "application/json") async throws -> HTTPClient.Response {
                    var headers = ["Content-Type": contentType]
                    if let key { headers["Authorization"] = "Bearer \(key)" }
                    return try await tracker.request("POST", "/v1/beacons", headers: headers, body: Data(body.utf8))
                }
                let body = """
                    {"beacons": [
                      {"event": {"type": "impression", "requestId": "srv-1", "adUnit": "/4242/web/native", "formatId": "10063170", "eea": true, "reservation": true}},
                      {"event": {"type": "adchoices_click", "requestId": "srv-1", "adUnit": "/4242/web/native", "formatId": "10063170", "assetKey": "AdChoices"},
                       "destination": "https://adssettings.example/whythisad", "expiresIn": 3600}
                    ]}
                    """
                let r = try await mint(body, key: ingest)
                #expect(r.status == 200, "\(r.text)")
                #expect(r.headers["cache-control"] == "no-store")
                let minted = try #require(r.json["beacons"] as? [[String: Any]])
                #expect(minted.map { $0["type"] as? String } == ["impression", "adchoices_click"])
                let paths = minted.compactMap { $0["path"] as? String }
                #expect(paths.count == 2 && paths[0].hasPrefix("/v1/pixel.gif?t=") && paths[1].hasPrefix("/v1/click?t="))
                #expect(minted.allSatisfy { ($0["id"] as? String).flatMap { UUID(uuidString: $0) } != nil }, "ids are made by the server")

                #expect(try await fetch(tracker, paths[0]).status == 200)
                let about = try await fetch(tracker, paths[1])
                #expect(about.status == 302 && about.headers["location"] == "https://adssettings.example/whythisad")
                #expect(try await db.rows("SELECT type, eea, reservation, key_name FROM events ORDER BY type")
                        == [["impression", "t", "t", "beacon:ad-server"], ["adchoices_click", "f", "f", "beacon:ad-server"]])
                let totals = try await summary(tracker, key: report)
                #expect(totals["impressions"] == 1 && totals["adchoicesClicks"] == 1 && totals["clicks"] == 0, "\(totals)")

                #expect(try await mint(body, key: nil).status == 401)
                #expect(try await mint(body, key: report).status == 403)
                #expect(try await mint(body, key: ingest, contentType: "text/plain").status == 415)
                let bad = try await mint(#"{"beacons": [{"event": {"type": "click", "requestId": "srv-1", "adUnit": "/4242/web/native", "formatId": "10063170", "assetKey": "MainImage"}}]}"#, key: ingest)
                #expect(bad.status == 400)
                #expect(bad.json["error"] as? String == "invalid_beacon_request")
                #expect((bad.json["message"] as? String)?.hasPrefix("beacons[0].destination is required for a click beacon") == true, "\(bad.text)")
                let invalid = try await mint(#"{"beacons": [{"event": {"type": "impression", "requestId": "", "adUnit": "/4242/web/native", "formatId": "10063170"}}]}"#, key: ingest)
                #expect((invalid.json["message"] as? String)?.contains("requestId must not be empty") == true, "the validator of /v1/events: \(invalid.text)")
            }
        }
    }

    @Test func changingAnySignedFieldGets400AndNeitherARedirectNorAnEvent() async throws {
        try await withTestDatabase { db in
            try await withInProcessTracker(db, environment: environment) { tracker in
                let click = try await sign(clickArguments("web-2", ["--eea", "--reservation", "--source", "sdk", "--attribute", "page=home"]))
                let id = try #require(Forge.claims(of: click).firstMatch(of: /"id":"([0-9a-f-]{36})"/)?.1)
                let edits: [(String, String)] = [
                    (String(id), String(id.dropLast()) + (id.last == "0" ? "1" : "0")),  // event id
                    ("\"type\":\"click\"", "\"type\":\"adchoices_click\""),
                    ("web-2", "web-3"),  // request id
                    ("/4242/web/native", "/4242/web/other"),  // ad unit
                    ("10063170", "10063171"),  // format
                    ("MainImage", "Headline"),  // asset key
                    ("\"eea\":true", "\"eea\":false"),
                    ("\"reservation\":true", "\"reservation\":false"),
                    ("\"source\":\"sdk\"", "\"source\":\"app\""),
                    ("\"page\":\"home\"", "\"page\":\"away\""),  // an attribute
                    ("\"reservation\":true", "\"reservation\":true,\"test\":true"),  // a flag added
                    ("advertiser.example", "attacker.example"),  // destination
                    ("\"exp\":", "\"exp\":9"),  // expiry pushed out
                    ("\"iss\":\"cli\"", "\"iss\":\"app\""),  // issuer (the key name stored)
                ]
                for (from, to) in edits {
                    let r = try await fetch(tracker, Forge.replacing(click, from, with: to))
                    #expect(r.status == 400, "changed \(from) to \(to): \(r.status)")
                    #expect(r.headers["location"] == nil, "no redirect after changing \(from)")
                    #expect(r.json["error"] as? String == "invalid_beacon")
                    #expect((r.json["message"] as? String)?.contains("signature does not match") == true, "\(r.text)")
                    expectBeaconHeaders(r)
                }
                let pixel = try await sign(impressionArguments("web-2", ["--test"]))
                let untested = try await fetch(tracker, Forge.replacing(pixel, "\"test\":true", with: "\"test\":false"))
                #expect(untested.status == 400, "test traffic cannot be turned into counted traffic")
                #expect(try await db.scalar("SELECT count(*) FROM events") == "0")
                #expect(try await db.scalar("SELECT count(*) FROM beacon_rejections") == "0")
                #expect(try await fetch(tracker, click).status == 302, "the untouched token still works")
            }
        }
    }

    @Test func missingMalformedForeignAndMisplacedTokensGet400WithoutARedirect() async throws {
        try await withTestDatabase { db in
            try await withInProcessTracker(db, environment: environment) { tracker in
                let foreign = try await sign(clickArguments("web-4"), secret: strangerSecret)
                let pixel = try await sign(impressionArguments("web-4"))
                let cases: [(String, String)] = [
                    ("/v1/click", "the query parameter t is required"),
                    ("/v1/pixel.gif?t=", "the query parameter t is required"),
                    ("/v1/click?t=not-a-token", "the token must be <payload>.<signature>"),
                    ("/v1/click?t=" + String(repeating: "A", count: 5000), "beacon tokens are at most 4096"),
                    (foreign, "signature does not match"),
                    (pixel.replacingOccurrences(of: "/v1/pixel.gif", with: "/v1/click"), "this token is for a impression event: use /v1/pixel.gif"),
                    (String(pixel.dropLast(3)), "signature"),
                ]
                for (path, message) in cases {
                    let r = try await fetch(tracker, path)
                    #expect(r.status == 400, "\(path.prefix(60)): \(r.status)")
                    #expect(r.headers["location"] == nil)
                    #expect((r.json["message"] as? String)?.contains(message) == true, "\(path.prefix(60)): \(r.text)")
                    expectBeaconHeaders(r)
                }
                #expect(try await db.scalar("SELECT count(*) FROM events") == "0")
            }
        }
    }

    @Test func anExpiredClickStillRedirectsButIsStoredAsRejectedAndNotCounted() async throws {
        try await withTestDatabase { db in
            let report = try await db.createKey("reader", scope: .report)
            try await withInProcessTracker(db, environment: environment) { tracker in
                let click = try await sign(clickArguments("web-5", ["--expires-in", "1"]))
                let pixel = try await sign(impressionArguments("web-5", ["--expires-in", "1"]))
                try await Task.sleep(for: .milliseconds(2_100))
                for attempt in 1...2 {
                    let r = try await fetch(tracker, click)
                    #expect(r.status == 302 && r.headers["location"] == landing, "a user's click never breaks")
                    #expect(r.headers["x-beacon-outcome"] == "rejected_expired")
                    expectBeaconHeaders(r)
                    let row = try await db.rows("SELECT type, request_id, reason, attempts, destination, issuer, event->>'assetKey' FROM beacon_rejections")
                    #expect(row == [["click", "web-5", "expired", String(attempt), landing, "cli", "MainImage"]])
                }
                let message = try await db.scalar("SELECT message FROM beacon_rejections")
                #expect(message?.hasPrefix("the beacon expired at ") == true)
                let expiredPixel = try await fetch(tracker, pixel)
                #expect(expiredPixel.status == 200 && expiredPixel.headers["content-type"] == "image/gif")
                #expect(expiredPixel.headers["x-beacon-outcome"] == "rejected_expired")
                #expect(try await db.scalar("SELECT count(*) FROM events") == "0", "nothing expired reaches the log")
                let totals = try await summary(tracker, key: report)
                #expect(totals["clicks", default: 0] == 0 && totals["impressions", default: 0] == 0, "\(totals)")

                let listed = try await runTrackerCommand(["beacon", "rejections", "--database-url", db.url])
                #expect(listed.status == 0)
                #expect(listed.stdout.contains("web-5") && listed.stdout.contains("expired"), "\(listed.output)")
            }
        }
    }

    @Test func aRotatedSecretStillAcceptsTokensOfThePreviousOne() async throws {
        try await withTestDatabase { db in
            let old = try await sign(clickArguments("web-6"))
            let newSecret = "the-next-beacon-secret-0123456789abcdef"
            try await withInProcessTracker(db, environment: ["TRACKER_BEACON_SECRET": newSecret, "TRACKER_BEACON_PREVIOUS_SECRET": secret]) { tracker in
                let oldClick = try await fetch(tracker, old)
                let newClick = try await fetch(tracker, try await sign(clickArguments("web-7"), secret: newSecret))
                #expect(oldClick.status == 302 && newClick.status == 302, "\(oldClick.text) \(newClick.text)")
            }
            try await withInProcessTracker(db, environment: ["TRACKER_BEACON_SECRET": newSecret]) { tracker in
                let r = try await fetch(tracker, old)
                #expect(r.status == 400 && r.headers["location"] == nil, "the previous secret, once dropped, no longer signs anything")
            }
        }
    }

    @Test func withoutASecretTheBeaconEndpointsSaySoAndTheCommandsRefuse() async throws {
        try await withTestDatabase { db in
            let path = try await sign(clickArguments("web-8"))
            let ingest = try await db.createKey("ad-server", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                for r in [try await fetch(tracker, path), try await fetch(tracker, path.replacingOccurrences(of: "/v1/click", with: "/v1/pixel.gif")),
                          try await tracker.request("POST", "/v1/beacons", headers: ["Authorization": "Bearer \(ingest)", "Content-Type": "application/json"],
                                                     body: Data(#"{"beacons":[]}"#.utf8))] {
                    #expect(r.status == 503)
                    #expect(r.headers["location"] == nil)
                    #expect(r.json["error"] as? String == "beacons_not_configured")
                    #expect((r.json["message"] as? String)?.contains("TRACKER_BEACON_SECRET") == true)
                }
            }
            let unsigned = try await runTrackerCommand(["beacon", "sign"] + clickArguments("web-9"), environment: ["TRACKER_BEACON_SECRET": ""])
            #expect(unsigned.status != 0 && unsigned.output.contains("TRACKER_BEACON_SECRET is not set"))
            let short = try await runTrackerCommand(["serve", "--port", "0", "--database-url", db.url], environment: ["TRACKER_BEACON_SECRET": "short"])
            #expect(short.status != 0 && short.output.contains("TRACKER_BEACON_SECRET is 5 bytes; at least 32"), "\(short.output)")
        }
    }
}

/// A cluster of its own, stopped under a running tracker.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct BeaconOutageTests {
    @Test func withTheDatabaseDownAPixelGets503AndAClickStillRedirectsUnrecorded() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-beacon-outage-\(UUID().uuidString)").path
        let port = freeLoopbackPort()
        try await TestEnvironment.postgres("start", dir: dir, port: port)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        do {
            let db = try await TestDatabase(adminURL: "postgresql://postgres@127.0.0.1:\(port)/postgres")
            let pixel = try await sign(impressionArguments("down-1"))
            let click = try await sign(clickArguments("down-1"))
            try await withInProcessTracker(db, environment: ["TRACKER_BEACON_SECRET": secret, "TRACKER_PROJECTOR": "off"]) { tracker in
                try await TestEnvironment.postgres("stop", dir: dir, port: port)
                let down = try await fetch(tracker, pixel)
                #expect(down.status == 503)
                #expect(down.json["error"] as? String == "database_unavailable")
                #expect(Int(down.headers["retry-after"] ?? "") != nil)
                expectBeaconHeaders(down)
                let started = ContinuousClock.now
                let redirected = try await fetch(tracker, click)
                #expect(redirected.status == 302 && redirected.headers["location"] == landing, "the click is not broken")
                #expect(["not_recorded", "unconfirmed"].contains(redirected.headers["x-beacon-outcome"] ?? ""), "\(redirected.headers)")
                #expect(ContinuousClock.now - started < .seconds(5), "the click waits at most about 2 s for the database")
                try await TestEnvironment.postgres("start", dir: dir, port: port)
                let back = try await eventually(within: .seconds(10)) { () -> HTTPClient.Response? in
                    let r = try await fetch(tracker, pixel)
                    return r.status == 200 ? r : nil
                }
                #expect(back?.headers["x-beacon-outcome"] == "recorded", "the browser's next load records the impression")
            }
            #expect(try await db.scalar("SELECT string_agg(type::text, ',') FROM events") == "impression",
                    "the click made while the database was down is not recorded (docs/CLIENT.md says so)")
            await db.drop()
        } catch {
            try? await TestEnvironment.postgres("stop", dir: dir, port: port)
            throw error
        }
        try await TestEnvironment.postgres("stop", dir: dir, port: port)
    }
}

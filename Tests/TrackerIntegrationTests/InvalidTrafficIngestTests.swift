import Foundation
import HummingbirdTesting
import Testing
import Tracker

/// What the log records of each event's client (the peer and forwarded addresses through the
/// real server, the rest through the tracker in process): the request's
/// `User-Agent` and peer, `X-Forwarded-For` only from trusted proxies, an event's own
/// `userAgent`/`ip` only from server keys, truncated addresses on request; then a rule set
/// activated from files through the command line, labelling that traffic in every report.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct InvalidTrafficIngestTests {
    /// The stored client of event `id`: its user agent and address as text.
    func client(_ db: TestDatabase, _ id: String) async throws -> [String?] {
        try await db.rows("""
            SELECT u.user_agent, host(e.client_ip) FROM events e LEFT JOIN user_agents u ON u.id = e.user_agent_id WHERE e.id = $1
            """, [id]).first ?? []
    }

    @Test func theRequestsUserAgentAndPeerAreRecordedAndOnlyServerKeysMaySetThemPerEvent() async throws {
        try await withTestDatabase { db in
            let app = try await db.createKey("app", scope: .ingest)
            let server = try await APIKeys(pool: db.pool).create(name: "s2s", scope: .ingest, server: true)
            try await withInProcessTracker(db, mode: .live) { tracker in
                let plain = Wire.event()
                let r = try await tracker.postEvents(Wire.batch([plain]), key: app, headers: ["User-Agent": "MyApp/4.2 (iPhone)"])
                #expect(r.json["accepted"] as? Int == 1)
                #expect(try await client(db, plain["id"] as! String) == ["MyApp/4.2 (iPhone)", "127.0.0.1"])

                // An ordinary key may not speak for a device: that event is rejected, naming the field; the rest is stored.
                let forged = Wire.event(extra: ["userAgent": "Googlebot/2.1", "ip": "66.249.66.1"])
                let fine = Wire.event()
                let refused = try await tracker.postEvents(Wire.batch([forged, fine]), key: app)
                #expect(refused.json["accepted"] as? Int == 1)
                let rejection = (refused.json["rejected"] as? [[String: Any]])?.first
                #expect(rejection?["index"] as? Int == 0)
                #expect((rejection?["error"] as? String)?.contains("userAgent may be set only with a server key") == true, "\(refused.text)")
                #expect((rejection?["error"] as? String)?.contains("ip may be set only with a server key") == true)

                // A server key's event carries the device's; one without them falls back to the request's.
                let device = Wire.event(extra: ["userAgent": "Mozilla/5.0 (Linux; Android 14)", "ip": "2001:DB8::1"])
                let own = Wire.event()
                let bad = Wire.event(extra: ["ip": "300.1.2.3"])
                let s2s = try await tracker.postEvents(Wire.batch([device, own, bad]), key: server, headers: ["User-Agent": "ad-server/1.0"])
                #expect(s2s.json["accepted"] as? Int == 2)
                #expect(((s2s.json["rejected"] as? [[String: Any]])?.first?["error"] as? String)?.contains("ip must be an IPv4 or IPv6 address") == true)
                #expect(try await client(db, device["id"] as! String) == ["Mozilla/5.0 (Linux; Android 14)", "2001:db8::1"])
                #expect(try await client(db, own["id"] as! String) == ["ad-server/1.0", "127.0.0.1"])
            }
            let (_, list) = try await runTrackerToEnd(["keys", "list", "--database-url", db.url])
            #expect(list.contains("ingest+server"), "\(list)")
        }
    }

    @Test func forwardedForIsBelievedOnlyFromTrustedProxiesAndAddressesCanBeTruncated() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("app", scope: .ingest)
            let forwarded = ["X-Forwarded-For": "198.51.100.7, 10.0.0.2"]
            try await withInProcessTracker(db, mode: .live) { tracker in
                let e = Wire.event()
                _ = try await tracker.postEvents(Wire.batch([e]), key: key, headers: forwarded)
                #expect(try await client(db, e["id"] as! String)[1] == "127.0.0.1", "an untrusted peer's X-Forwarded-For is ignored")
            }
            try await withInProcessTracker(db, environment: ["TRACKER_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"], mode: .live) { tracker in
                let e = Wire.event()
                _ = try await tracker.postEvents(Wire.batch([e]), key: key, headers: forwarded)
                #expect(try await client(db, e["id"] as! String)[1] == "198.51.100.7", "the right-most address that is not a trusted proxy")
                let noHeader = Wire.event()
                _ = try await tracker.postEvents(Wire.batch([noHeader]), key: key)
                #expect(try await client(db, noHeader["id"] as! String) == ["", "127.0.0.1"], "no User-Agent is the empty one")
            }
            try await withInProcessTracker(db, environment: ["TRACKER_TRUSTED_PROXIES": "127.0.0.1", "TRACKER_IP_STORAGE": "truncated"], mode: .live) { tracker in
                let e = Wire.event()
                _ = try await tracker.postEvents(Wire.batch([e]), key: key, headers: ["X-Forwarded-For": "203.0.113.77"])
                #expect(try await client(db, e["id"] as! String)[1] == "203.0.113.0", "the /24 only")
            }
            let (status, output) = try await runTrackerToEnd(["serve", "--port", "1", "--database-url", db.url],
                                                             environment: ["TRACKER_TRUSTED_PROXIES": "10.0.0.0/8, nonsense"])
            #expect(status != 0)
            #expect(output.contains("TRACKER_TRUSTED_PROXIES") && output.contains("nonsense"), "\(output)")
        }
    }

    /// The command line activates a rule set whose lists are files beside it (the
    /// crawler-user-agents format and a range file); after a rebuild every report, the ivt
    /// report and an ad's audit trail show the labels, and reports name the rule set.
    @Test func aRuleSetActivatedFromFilesLabelsTrafficInEveryReport() async throws {
        try await withTestDatabase { db in
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ivt-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            try Data(#"[{"pattern": "Googlebot\\/", "url": "http://www.google.com/bot.html"}, {"pattern": "[wW]get"}]"#.utf8)
                .write(to: dir.appendingPathComponent("crawlers.json"))
            try Data("# cloud\n34.64.0.0/10\n\n2600:1900::/28 # v6\n".utf8).write(to: dir.appendingPathComponent("ranges.txt"))
            try Data(#"{"name": "files", "userAgentLists": ["crawlers.json"], "ipRangeFiles": ["ranges.txt"]}"#.utf8)
                .write(to: dir.appendingPathComponent("rules.json"))
            try Data(#"{"userAgents": [{"pattern": "(unclosed"}]}"#.utf8).write(to: dir.appendingPathComponent("bad.json"))

            let (refused, refusal) = try await runTrackerToEnd(["ivt", "activate", dir.appendingPathComponent("bad.json").path, "--database-url", db.url])
            #expect(refused != 0)
            #expect(refusal.contains("(unclosed") && refusal.contains("nothing was activated"), "\(refusal)")
            let (status, output) = try await runTrackerToEnd(["ivt", "activate", dir.appendingPathComponent("rules.json").path, "--database-url", db.url])
            #expect(status == 0, "\(output)")
            #expect(output.contains("activated rule set 1") && output.contains("2 user agent pattern(s), 2 IP range(s)"), "\(output)")

            let app = try await db.createKey("app", scope: .ingest)
            let server = try await APIKeys(pool: db.pool).create(name: "s2s", scope: .ingest, server: true)
            let analyst = try await db.createKey("analyst", scope: .report)
            // The wait is 60 s: other tests' open transactions may hold the projector back.
            try await withInProcessTracker(db, environment: ["TRACKER_REPORT_WAIT": "60"]) { tracker in
                // Projections with nothing in them took rule set 1.
                let events: [[String: Any]] = [
                    Wire.event(requestId: "bot"), Wire.event(type: "click", requestId: "bot", assetKey: "MainImage"),
                    Wire.event(requestId: "cloud", extra: ["ip": "34.100.1.1"]),
                    Wire.event(requestId: "person", extra: ["ip": "192.0.2.10", "userAgent": "Mozilla/5.0 (iPhone)"]),
                ]
                _ = try await tracker.postEvents(Wire.batch(Array(events[0...1])), key: app,
                                                  headers: ["User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"])
                _ = try await tracker.postEvents(Wire.batch(Array(events[2...3])), key: server)
                let today = String(Wire.isoNow().prefix(10))
                let summary = try await tracker.request("GET", "/v1/reports/summary?from=\(today)&to=\(today)",
                                                         headers: ["Authorization": "Bearer \(analyst)"])
                #expect(summary.headers["x-ivt-rules"] == "1")
                #expect(summary.json["ivtRules"] as? Int == 1)
                let row = (summary.json["rows"] as? [[String: Any]])?.first
                #expect(row?["impressions"] as? Int == 1, "only the person's impression counts")
                #expect(row?["givtImpressions"] as? Int == 2)
                #expect(row?["givtClicks"] as? Int == 1)
                #expect(row?["clicks"] as? Int == 0)
                let ivt = try await tracker.request("GET", "/v1/reports/ivt?from=\(today)&to=\(today)&format=csv",
                                                     headers: ["Authorization": "Bearer \(analyst)"]).text
                #expect(ivt == """
                    day,adUnit,formatId,label,impressions,clicks,events
                    \(today),/1234/home/native,10063170,datacenter,1,0,1
                    \(today),/1234/home/native,10063170,declared_bot,1,1,2

                    """)
                let audit = try await tracker.request("GET", "/v1/ads/bot", headers: ["Authorization": "Bearer \(analyst)"])
                let labels = (audit.json["events"] as? [[String: Any]])?.compactMap { $0["label"] as? String }
                #expect(labels == ["declared_bot", "declared_bot"], "\(audit.text)")

                // A second rule set waits for a rebuild, and /readyz says so.
                try Data(#"{"userAgents": [{"pattern": "iphone"}]}"#.utf8).write(to: dir.appendingPathComponent("second.json"))
                let (second, _) = try await runTrackerToEnd(["ivt", "activate", dir.appendingPathComponent("second.json").path,
                                                             "--database-url", db.url])
                #expect(second == 0)
                let ready = try await tracker.request("GET", "/readyz").json
                #expect((ready["ivtRules"] as? [String: Any])?["newest"] as? Int == 2)
                let warnings = (ready["warnings"] as? [String])?.joined() ?? ""
                #expect(warnings.contains("rule set 2 waits"), "\(ready)")
                let (_, shown) = try await runTrackerToEnd(["ivt", "show", "--database-url", db.url])
                #expect(shown.contains("rule set 2") && shown.contains("the projections use rule set 1"), "\(shown)")
            }
        }
    }

    /// A pixel beacon's event records the browser that fetched it.
    @Test func aBeaconRecordsTheBrowser() async throws {
        try await withTestDatabase { db in
            let secret = String(repeating: "k", count: 40)
            try await withInProcessTracker(db, environment: ["TRACKER_BEACON_SECRET": secret], mode: .live) { tracker in
                let (status, url) = try await runTrackerToEnd(["beacon", "sign", "--type", "impression", "--request-id", "web-1",
                                                               "--ad-unit", "/1234/web/native", "--format-id", "native"],
                                                              environment: ["TRACKER_BEACON_SECRET": secret])
                #expect(status == 0)
                let line = try #require(url.split(separator: "\n").last.map(String.init))
                let start = try #require(line.range(of: "/v1/"))
                let path = String(line[start.lowerBound...])
                let r = try await tracker.request("GET", path, headers: ["User-Agent": "Mozilla/5.0 (Macintosh) Safari/17"])
                #expect(r.status == 200)
                let row = try await db.rows("""
                    SELECT u.user_agent, host(e.client_ip) FROM events e JOIN user_agents u ON u.id = e.user_agent_id WHERE e.request_id = 'web-1'
                    """)
                #expect(row.first == ["Mozilla/5.0 (Macintosh) Safari/17", "127.0.0.1"])
            }
        }
    }
}

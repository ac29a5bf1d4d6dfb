import Foundation
import Testing
import Tracker

/// What a browser may do with the tracker (docs/OPERATIONS.md, "Browsers"): no cross-origin
/// access for scripts, keys only in the Authorization header, and the security headers of
/// every answer a browser renders or could cache. In process: these are statuses and headers.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct BrowserPolicyTests {
    static let origin = "https://attacker.example"

    @Test func noAnswerGrantsCrossOriginAccessAndPreflightsAreRefused() async throws {
        try await withTestDatabase { db in
            let ingest = try await db.createKey("app", scope: .ingest)
            let report = try await db.createKey("ops", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let day = String(Wire.isoNow().prefix(10))
                for path in ["/v1/events", "/v1/beacons", "/v1/reports/summary", "/v1/ads/req-1"] {
                    let preflight = try await tracker.request("OPTIONS", path, headers: [
                        "Origin": Self.origin, "Access-Control-Request-Method": "POST",
                        "Access-Control-Request-Headers": "authorization, content-type",
                    ])
                    #expect(preflight.status == 405, "OPTIONS \(path): \(preflight.status)")
                    #expect(preflight.headers["allow"] != nil, "OPTIONS \(path) says which methods exist")
                    #expect(preflight.headers.keys.allSatisfy { !$0.hasPrefix("access-control-") }, "OPTIONS \(path): \(preflight.headers)")
                }
                let answers = [
                    try await tracker.postEvents(Wire.batch([Wire.event()]), key: ingest, headers: ["Origin": Self.origin]),
                    try await tracker.request("GET", "/v1/reports/summary?from=\(day)&to=\(day)",
                                               headers: ["Authorization": "Bearer \(report)", "Origin": Self.origin]),
                    try await tracker.request("GET", "/", headers: ["Origin": Self.origin]),
                    try await tracker.request("GET", "/v1/pixel.gif?t=x", headers: ["Origin": Self.origin]),
                ]
                for answer in answers {
                    #expect(answer.headers.keys.allSatisfy { !$0.hasPrefix("access-control-") }, "\(answer.status) \(answer.headers)")
                }
                #expect(answers[0].status == 200 && answers[1].status == 200, "the requests themselves work: \(answers.map(\.status))")
            }
        }
    }

    @Test func aKeyInTheURLIsNotACredential() async throws {
        try await withTestDatabase { db in
            let report = try await db.createKey("ops", scope: .report)
            let ingest = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                let day = String(Wire.isoNow().prefix(10))
                for parameter in ["key", "api_key", "access_token", "token"] {
                    let r = try await tracker.request("GET", "/v1/reports/summary?from=\(day)&to=\(day)&\(parameter)=\(report)")
                    #expect(r.status == 401, "?\(parameter)= opened a report: \(r.status)")
                    let e = try await tracker.request("POST", "/v1/events?\(parameter)=\(ingest)",
                                                       headers: ["Content-Type": "application/json"], body: Wire.batch([Wire.event()]))
                    #expect(e.status == 401, "?\(parameter)= stored events: \(e.status)")
                }
                #expect(try await db.scalar("SELECT count(*) FROM events") == "0")
            }
        }
    }

    @Test func everyAnswerABrowserRendersOrCouldCacheCarriesItsSecurityHeaders() async throws {
        try await withTestDatabase { db in
            let report = try await db.createKey("ops", scope: .report)
            let ingest = try await db.createKey("app", scope: .ingest)
            try await withInProcessTracker(db) { tracker in
                _ = try await tracker.postEvents(Wire.batch([Wire.event(requestId: "req-h")]), key: ingest)
                let page = try await tracker.request("GET", "/")
                #expect(page.status == 200)
                let csp = page.headers["content-security-policy"] ?? ""
                for directive in ["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"] {
                    #expect(csp.contains(directive), "the dashboard's CSP lacks \(directive): \(csp)")
                }
                #expect(!csp.contains("unsafe-inline"), "no inline script or style: \(csp)")
                #expect(page.headers["x-content-type-options"] == "nosniff")
                #expect(page.headers["referrer-policy"] == "no-referrer")
                let day = String(Wire.isoNow().prefix(10))
                let auth = ["Authorization": "Bearer \(report)"]
                for path in ["/v1/reports/summary?from=\(day)&to=\(day)", "/v1/reports/summary?from=\(day)&to=\(day)&format=csv", "/v1/ads/req-h"] {
                    let r = try await tracker.request("GET", path, headers: auth)
                    #expect(r.status == 200, "\(path): \(r.status) \(r.text)")
                    #expect(r.headers["cache-control"] == "no-store", "\(path) may be cached: \(r.headers)")
                    #expect(r.headers["x-content-type-options"] == "nosniff", "\(path): \(r.headers)")
                }
            }
        }
    }
}

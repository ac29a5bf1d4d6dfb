import Foundation
import Testing
import Tracker

/// The Low HTTP corners of issue 12, as a client sees them (in process: statuses and headers).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct HTTPCornerTests {
    /// `adUnit=/1/a%00x` was cut at the NUL and answered for `/1/a`; `%FF` matched nothing and
    /// answered an empty 200. Both are 400s naming the parameter.
    @Test func aReportFilterWithNulOrInvalidUTF8IsRefusedNamingTheParameter() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("reports", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let headers = ["Authorization": "Bearer \(key)"]
                for (filter, rule) in [("adUnit=%2F1%2Fa%00x", "adUnit must not contain the character U+0000"),
                                       ("adUnit=%2F1%2Fa%FFx", "adUnit must be UTF-8 text"),
                                       ("formatId=1%C3", "formatId must be UTF-8 text")] {
                    let r = try await tracker.request("GET", "/v1/reports/summary?from=2026-11-01&to=2026-11-02&\(filter)", headers: headers)
                    #expect(r.status == 400, "\(filter): \(r.status)")
                    #expect(r.json["error"] as? String == "invalid_parameter")
                    let message = r.json["message"] as? String
                    #expect(message?.contains(rule) == true, "\(filter): \(String(describing: message))")
                }
                let fine = try await tracker.request("GET", "/v1/reports/summary?from=2026-11-01&to=2026-11-02&adUnit=%2F1%2F%C3%A5", headers: headers)
                #expect(fine.status == 200)
                // Reports are private figures: never cached, never sniffed as another type.
                #expect(fine.headers["cache-control"] == "no-store")
                #expect(fine.headers["x-content-type-options"] == "nosniff")
            }
        }
    }

    /// A method a known path does not offer is a 405 naming the ones it does (404 before);
    /// an unknown path stays 404; `%+0` is not a percent-escape (it read as NUL and was refused).
    @Test func aWrongMethodIs405WithAllowAndAnUnknownPathIs404() async throws {
        try await withTestDatabase { db in
            let key = try await db.createKey("reports", scope: .report)
            try await withInProcessTracker(db) { tracker in
                let put = try await tracker.request("PUT", "/v1/events", body: Data("{}".utf8))
                #expect(put.status == 405)
                #expect(put.headers["allow"] == "POST")
                #expect(put.json["error"] as? String == "method_not_allowed")
                let post = try await tracker.request("POST", "/v1/reports/summary")
                #expect(post.status == 405)
                #expect(post.headers["allow"] == "GET, HEAD")
                #expect(try await tracker.request("GET", "/v1/nothing-here").status == 404)
                let plus = try await tracker.request("GET", "/v1/reports/summary?from=2026-11-01&to=2026-11-02&adUnit=%+0",
                                                      headers: ["Authorization": "Bearer \(key)"])
                // Read as the text '%+0' (a lone % kept as it is), not as a NUL: refused as no ad unit path.
                #expect(plus.status == 400 && plus.text.contains("got '%+0'") && !plus.text.contains("U+0000"),
                        "an adUnit of '%+0' is text, not a NUL: \(plus.text)")
            }
        }
    }
}

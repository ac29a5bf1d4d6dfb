import Foundation
import Testing
import Tracker

/// The server's own log lines: JSON, one per line, every request's lines carrying its id, and
/// never a key, whatever a client sends.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct RequestLogTests {
    @Test func keysNeverAppearInTheLogEvenAtDebugLevel() async throws {
        try await withTestDatabase { db in
            let ingestKey = try await db.createKey("app", scope: .ingest)
            let reportKey = try await db.createKey("ops", scope: .report)
            let unknownKey = "tk_" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
            // A process: the request log is the process's standard output.
            let tracker = try await TrackerProcess(databaseURL: db.url, environment: [
                "TRACKER_LOG_LEVEL": "debug", "TRACKER_LOG_FORMAT": "json",
            ])
            let client = tracker.client
            let good = Wire.batch([Wire.event(), Wire.event(type: "click")])  // the click lacks its asset key
            let range = "from=2026-01-01&to=2026-01-02"
            var statuses: [Int] = []
            for key in [ingestKey, reportKey, unknownKey] {
                statuses.append(try client.postEvents(good, key: key).status)
                statuses.append(try client.request("GET", "/v1/reports/summary?\(range)", headers: ["Authorization": "Bearer \(key)"]).status)
                // Keys where they do not belong: in the query, in another header, without "Bearer".
                statuses.append(try client.request("GET", "/v1/reports/summary?\(range)&key=\(key)", headers: ["X-Api-Key": key]).status)
                statuses.append(try client.request("GET", "/v1/reports/summary?\(range)", headers: ["Authorization": key]).status)
                statuses.append(try client.postEvents(Data("{\"events\": [\"\(key)\"]}".utf8), key: key).status)
                statuses.append(try client.postEvents(Data("not json \(key)".utf8), key: key).status)
            }
            #expect(Set(statuses) == [200, 400, 401, 403], "\(statuses)")
            #expect(await tracker.terminate() == 0)

            let log = try String(contentsOf: tracker.output, encoding: .utf8)
            for (name, key) in [("ingest", ingestKey), ("report", reportKey), ("unknown", unknownKey)] {
                #expect(!log.contains(key), "the \(name) key is in the tracker's log")
                #expect(!log.contains(String(key.suffix(16))), "a part of the \(name) key is in the tracker's log")
            }
            let requestLines = try Self.lines(log).filter { $0["message"] as? String == "request" }
            #expect(requestLines.count >= statuses.count, "a debug line per request")
        }
    }

    @Test func everyLineOfARequestCarriesItsIdWhichTheResponseReturns() async throws {
        try await withTestDatabase { db in
            let ingestKey = try await db.createKey("app", scope: .ingest)
            // A process: the request log is the process's standard output.
            let tracker = try await TrackerProcess(databaseURL: db.url, environment: [
                "TRACKER_LOG_LEVEL": "debug", "TRACKER_LOG_FORMAT": "json",
            ])
            let client = tracker.client
            let chosen = "lb-" + UUID().uuidString
            let sent = try client.postEvents(Wire.batch([Wire.event()]), key: ingestKey, headers: ["X-Request-Id": chosen])
            #expect(sent.status == 200)
            #expect(sent.headers["x-request-id"] == chosen, "a sane X-Request-Id is kept")

            let generated = try client.request("GET", "/no-such-path").headers["x-request-id"] ?? ""
            #expect(generated.count >= 16, "an id is generated when none is sent")
            let tooLong = String(repeating: "a", count: 129)
            for insane in [tooLong, "two words", "tab\there"] {
                let id = try client.request("GET", "/healthz", headers: ["X-Request-Id": insane]).headers["x-request-id"]
                #expect(id != nil && id != insane && id!.count >= 16, "'\(insane)' is replaced")
            }
            #expect(await tracker.terminate() == 0)

            let lines = try Self.lines(try String(contentsOf: tracker.output, encoding: .utf8))
            let ofChosen = lines.filter { $0["tracker.request_id"] as? String == chosen }
            #expect(Set(ofChosen.compactMap { $0["message"] as? String }) == ["batch stored", "request"])
            #expect(ofChosen.allSatisfy { $0["hb.request.id"] == nil }, "one id per line")
            let ofGenerated = lines.filter { $0["tracker.request_id"] as? String == generated }
            #expect(ofGenerated.first?["http.status"] as? String == "404")
            #expect(ofGenerated.first?["http.route"] as? String == "NotFound")
        }
    }

    /// The JSON lines of the output (the file is per port, and an earlier process on the same
    /// port may have left lines of another format: the checks look for this run's ids).
    static func lines(_ log: String) throws -> [[String: Any]] {
        log.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }
}

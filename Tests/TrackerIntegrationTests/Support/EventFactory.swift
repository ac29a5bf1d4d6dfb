import Foundation
import Testing

/// Builds wire-format events and batches for tests.
enum Wire {
    static func isoNow(offsetSeconds: Double = 0) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: Date().addingTimeInterval(offsetSeconds))
    }

    static func event(
        id: String = UUID().uuidString.lowercased(), type: String = "impression", requestId: String = "req-1",
        adUnit: String = "/1234/home/native", formatId: String = "10063170", assetKey: String? = nil,
        occurredAt: String? = nil, extra: [String: Any] = [:]
    ) -> [String: Any] {
        var e: [String: Any] = [
            "id": id, "type": type, "requestId": requestId, "adUnit": adUnit, "formatId": formatId,
            "occurredAt": occurredAt ?? isoNow(offsetSeconds: -1),
        ]
        if let assetKey { e["assetKey"] = assetKey }
        for (k, v) in extra { e[k] = v }
        return e
    }

    static func batch(_ events: [[String: Any]], sentAt: String? = nil) -> Data {
        var body: [String: Any] = ["events": events]
        if let sentAt { body["sentAt"] = sentAt }
        return try! JSONSerialization.data(withJSONObject: body)
    }
}

extension HTTPClient {
    func postEvents(_ body: Data, key: String, headers extra: [String: String] = [:]) throws -> Response {
        var headers = ["Authorization": "Bearer \(key)", "Content-Type": "application/json"]
        for (k, v) in extra { headers[k] = v }
        return try request("POST", "/v1/events", headers: headers, body: body)
    }
}

/// gzip of `data` by the system's gzip, so the test does not share code with the server.
func gzipped(_ data: Data) async throws -> Data {
    let dir = FileManager.default.temporaryDirectory
    let input = dir.appendingPathComponent("gzip-in-\(UUID().uuidString)")
    let output = dir.appendingPathComponent("gzip-out-\(UUID().uuidString)")
    defer {
        try? FileManager.default.removeItem(at: input)
        try? FileManager.default.removeItem(at: output)
    }
    try data.write(to: input)
    let status = try await Subprocess.run("/bin/gzip", ["-c"], inputPath: input.path, outputPath: output.path)
    try #require(status == 0)
    return try Data(contentsOf: output)
}

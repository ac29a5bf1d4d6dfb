import Foundation

/// The tracker's answer to a `200`: the protocol's section 1 (docs/PROTOCOL.md) receipt.
struct Receipt: Decodable, Equatable, Sendable {
    struct Rejected: Decodable, Equatable, Sendable {
        var index: Int
        var id: String?
        var error: String
    }

    var accepted: Int
    var duplicates: Int
    var rejected: [Rejected]
}

/// `{"error": "<code>", "message": "<what to fix>"}`, the body of every error answer.
struct ErrorBody: Decodable, Equatable, Sendable {
    var error: String
    var message: String
}

/// What one answer means for the batch that was sent, as a pure function of the answer.
///
/// The protocol's section 1 (docs/PROTOCOL.md) fixes what each status means on the server; this is the client's reading:
/// - `200` with a receipt: done. Per-event rejections are final (never sent again).
/// - `400` (the body is not a batch) and `413` (over a limit): the batch is halved until the
///   event that causes it is alone, then that event is rejected with the server's message.
///   The client itself never writes such a batch, so this takes a damaged record or a proxy
///   with a smaller body limit; either way one event cannot block the queue, and no request
///   is repeated unchanged.
/// - `408`, `429`, `5xx`, no answer at all, or a `2xx`/`3xx` that is not a receipt (a captive
///   portal): retried, with backoff, and never before `Retry-After`.
/// - `401`, `403`, `404`, `405`, `415` and any other `4xx`: stop. The key, the URL or
///   something in between is wrong, and no retry can fix it; the events stay queued.
enum Verdict: Equatable, Sendable {
    case delivered(Receipt)
    case shrink(status: Int)
    case rejectSole(status: Int, message: String)
    case retry(after: Duration?, reason: AdTracker.RetryReason)
    case stop(AdTracker.StopReason)

    static func judge(_ result: Result<IngestResponse, any Error>, events: Int, wallMicros: Int64) -> Verdict {
        let response: IngestResponse
        switch result {
        case .failure(let error):
            return .retry(after: nil, reason: .transport(describe(error)))
        case .success(let r):
            response = r
        }
        let status = response.status
        let errorBody = try? JSONDecoder().decode(ErrorBody.self, from: response.body)
        switch status {
        case 200..<300:
            if let receipt = try? JSONDecoder().decode(Receipt.self, from: response.body) { return .delivered(receipt) }
            return .retry(after: nil, reason: .status(status, error: nil, message: "the answer is not a tracker receipt"))
        case 400, 413:
            if events > 1 { return .shrink(status: status) }
            return .rejectSole(status: status, message: errorBody?.message ?? "refused with status \(status)")
        case 408, 429, 500..<600, 100..<200, 300..<400:
            return .retry(after: retryAfter(response.retryAfter, wallMicros: wallMicros),
                          reason: .status(status, error: errorBody?.error, message: errorBody?.message))
        default:
            return .stop(AdTracker.StopReason(status: status, error: errorBody?.error, message: errorBody?.message))
        }
    }

    /// `Retry-After` as delay-seconds or an HTTP-date (RFC 9110 section 10.2.3).
    static func retryAfter(_ value: String?, wallMicros: Int64) -> Duration? {
        guard let text = value?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let seconds = Int(text) { return seconds >= 0 ? .seconds(seconds) : nil }
        guard let at = httpDateMicros(text) else { return nil }
        return .microseconds(max(0, at - wallMicros))
    }

    /// IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`, in Unix microseconds.
    static func httpDateMicros(_ text: String) -> Int64? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int64(parts[1]), let year = Int64(parts[3]) else { return nil }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard let monthIndex = months.firstIndex(of: String(parts[2])) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int64($0) }
        guard clock.count == 3 else { return nil }
        // Days since 1970-01-01 from a civil date (Howard Hinnant's algorithm).
        let month = Int64(monthIndex + 1)
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return ((days * 86_400) + clock[0] * 3600 + clock[1] * 60 + clock[2]) * 1_000_000
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? URLError { return "URLError \(error.code.rawValue): \(error.localizedDescription)" }
        return String(describing: error)
    }
}

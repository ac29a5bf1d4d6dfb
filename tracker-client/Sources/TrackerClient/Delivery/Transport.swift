import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The server's answer to one `POST /v1/events`.
struct IngestResponse: Sendable {
    var status: Int
    var retryAfter: String?
    var body: Data
}

/// Sends one gzipped batch; throws when no answer came (no network, refused, timed out).
///
/// A protocol so the unit tests can answer requests themselves, in any order they need.
protocol IngestTransport: Sendable {
    func post(_ gzippedBody: [UInt8]) async throws -> IngestResponse
}

/// `URLSession`, with no cache, no cookies and one connection kept alive to the tracker.
struct URLSessionTransport: IngestTransport {
    let session: URLSession
    let url: URL
    let authorization: String
    let timeout: TimeInterval

    init(endpoint: URL, ingestKey: String, timeout: Duration) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpMaximumConnectionsPerHost = 1
        let seconds = Double(timeout.micros) / 1_000_000
        configuration.timeoutIntervalForRequest = seconds
        configuration.timeoutIntervalForResource = seconds
        session = URLSession(configuration: configuration)
        url = endpoint.appendingPathComponent("v1").appendingPathComponent("events")
        authorization = "Bearer " + ingestKey
        self.timeout = seconds
    }

    func post(_ gzippedBody: [UInt8]) async throws -> IngestResponse {
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
        request.setValue(authorization, forHTTPHeaderField: "Authorization")
        request.httpBody = Data(gzippedBody)
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        return IngestResponse(status: http.statusCode, retryAfter: http.value(forHTTPHeaderField: "Retry-After"), body: data)
    }
}

import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Tracker

/// JSON answers through `Codable`.
///
/// Three bodies are written by hand instead (with `JSONText` for their strings): the ingest
/// receipt and the error body, which answer every request of a load or an overload (by hand
/// they cost 0.29 µs and 0.55 µs, with `JSONEncoder` 2.77 µs and 1.94 µs), and a report,
/// whose columns keep the report's order (`JSONEncoder` writes an object's keys in no fixed
/// order) and which takes half the time. `make bench-json` measures both ways on the same
/// bodies; docs/PERFORMANCE.md has the figures.
enum JSONBody {
    /// Encodes `value`; `nil` members are left out, `/` is not escaped.
    static func data(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return try encoder.encode(value)
    }

    /// `value` as the answer; a value JSON cannot hold (a non-finite number) is a `500`.
    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> Response {
        var headers = headers
        headers[.contentType] = "application/json"
        guard let body = try? data(value) else {
            return APIError(.internal, "the answer could not be written as JSON").response()
        }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }
}

/// `/readyz`'s answer.
struct Readiness: Encodable {
    var status: String
    var database: String
    var migrations: String? = nil
    var pendingVersions: [Int]? = nil
    var projector: String? = nil
    var projectorError: String? = nil
    var projectionLag: Lag? = nil
    /// The invalid-traffic rule set the projections use, and the newest (waiting for a rebuild when greater).
    var ivtRules: Rules? = nil
    var warnings: [String]? = nil

    struct Rules: Encodable {
        var projections: Int
        var newest: Int
    }

    struct Lag: Encodable {
        var events: Int
        var seconds: Double
    }

    static let databaseUnavailable = Readiness(status: "not_ready", database: "unavailable")
}

/// A minted beacon as `POST /v1/beacons` and `tracker beacon --output json` give it.
struct MintedBeaconJSON: Encodable {
    var id: String
    var type: String
    var token: String
    var path: String
    /// The whole address (`tracker beacon` only, where the base URL is known).
    var url: String? = nil
    var expiresAt: String

    init(_ beacon: MintedBeacon, url: String? = nil) {
        id = beacon.id.text
        type = beacon.type.rawValue
        token = beacon.token
        path = beacon.path
        self.url = url
        expiresAt = beacon.expiresAt.rfc3339
    }
}

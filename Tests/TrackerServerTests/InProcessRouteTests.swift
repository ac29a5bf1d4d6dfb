import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing
import Tracker
@testable import TrackerServer

/// The HTTP layer in process (`app.test(.router)`): statuses, error shapes and headers that need
/// no socket. The database is one that refuses connections, so whatever reaches it shows how
/// the API answers while PostgreSQL is down. Behaviour that needs sockets or a real database
/// (slow clients, kill -9, SIGTERM, stored events) stays in TrackerIntegrationTests.
struct InProcessRouteTests {
    /// The tracker as `tracker serve` assembles it, over a database at a port nothing listens on.
    private func withRoutes(defaultTimeZone: String? = nil,
                            _ test: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        var configuration = ServeConfiguration(databaseURL: "host=127.0.0.1 port=9 dbname=none connect_timeout=2")
        configuration.defaultTimeZone = defaultTimeZone
        configuration.poolSize = 2
        configuration.maxConcurrentBatches = 4
        configuration.bodyBudgetBytes = 1 << 20
        configuration.chartLibraryPath = "/nonexistent/chart.js"
        // The database is down on purpose: its retries are not news.
        var logger = Logger(label: "in-process-test")
        logger.logLevel = .critical
        try await buildApplication(configuration, logger: logger).test(.router) { client in try await test(client) }
    }

    private func json(_ body: ByteBuffer) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any] ?? [:]
    }

    @Test func anUnknownPathIsA404WithTheJSONErrorShape() async throws {
        try await withRoutes { client in
            try await client.execute(uri: "/v1/nothing-here", method: .get) { response in
                #expect(response.status == .notFound)
                #expect(response.headers[.contentType] == "application/json")
                #expect(self.json(response.body)["error"] as? String == "not_found")
            }
        }
    }

    @Test func aWrongMethodIsA405NamingTheAllowedOnes() async throws {
        try await withRoutes { client in
            try await client.execute(uri: "/v1/events", method: .delete) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow]?.contains("POST") == true, "\(response.headers)")
                #expect(self.json(response.body)["error"] as? String == "method_not_allowed")
            }
            // A CORS preflight is a wrong method too: no answer grants cross-origin access.
            let preflight: HTTPFields = [.origin: "https://evil.example", .accessControlRequestMethod: "POST"]
            try await client.execute(uri: "/v1/events", method: .options, headers: preflight) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.accessControlAllowOrigin] == nil)
            }
        }
    }

    @Test func livenessAnswersWithoutTheDatabaseAndReadinessSaysItIsMissing() async throws {
        try await withRoutes { client in
            try await client.execute(uri: "/healthz", method: .get) { response in
                #expect(response.status == .ok)
                #expect(self.json(response.body)["status"] as? String == "ok")
            }
            try await client.execute(uri: "/readyz", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
            }
        }
    }

    @Test func ingestWithoutAKeyIs401AndWithOneWhileTheDatabaseIsDownIs503WithRetryAfter() async throws {
        try await withRoutes { client in
            let body = ByteBuffer(string: #"{"events":[]}"#)
            try await client.execute(uri: "/v1/events", method: .post, headers: [.contentType: "application/json"], body: body) { response in
                #expect(response.status == .unauthorized)
                #expect(self.json(response.body)["error"] as? String == "unauthorized")
                #expect((self.json(response.body)["message"] as? String)?.contains("Bearer") == true)
            }
            let headers: HTTPFields = [.contentType: "application/json", .authorization: "Bearer some-app-key"]
            try await client.execute(uri: "/v1/events", method: .post, headers: headers, body: body) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(self.json(response.body)["error"] as? String == "database_unavailable")
                #expect(Int(response.headers[.retryAfter] ?? "") ?? 0 >= 1)
            }
        }
    }

    @Test func theDashboardPageCarriesItsSecurityHeadersAndSaysWhenChartJSIsMissing() async throws {
        try await withRoutes { client in
            try await client.execute(uri: "/", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentSecurityPolicy]?.contains("default-src") == true)
                #expect(response.headers[.xContentTypeOptions] == "nosniff")
                #expect(response.headers[HTTPField.Name("Referrer-Policy")!] == "no-referrer")
            }
            try await client.execute(uri: "/dashboard/chart.js", method: .get) { response in
                #expect(response.status == .notFound)
                #expect(self.json(response.body)["error"] as? String == "chart_library_missing")
            }
        }
    }

    /// The page reads the deployment's zone from a file, as it runs no inline script.
    @Test func theDashboardsSettingsNameTheDeploymentsDefaultZoneOrNone() async throws {
        try await withRoutes(defaultTimeZone: "America/New_York") { client in
            try await client.execute(uri: "/dashboard/settings.json", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                #expect(response.headers[.contentSecurityPolicy]?.contains("default-src") == true)
                #expect(String(buffer: response.body) == #"{"defaultTimeZone":"America/New_York"}"#)
            }
        }
        try await withRoutes { client in
            try await client.execute(uri: "/dashboard/settings.json", method: .get) { response in
                #expect(String(buffer: response.body) == #"{"defaultTimeZone":null}"#)
            }
        }
    }
}

import Foundation
import Logging
import Testing
import Tracker

/// The PostgreSQL cluster and binary that `scripts/test.sh` prepared.
enum TestEnvironment {
    static var adminURL: String? { ProcessInfo.processInfo.environment["TRACKER_TEST_DATABASE_URL"] }
    static var binary: String? { ProcessInfo.processInfo.environment["TRACKER_BINARY"] }
    static var pgDir: String? { ProcessInfo.processInfo.environment["TRACKER_TEST_PG_DIR"] }
    static var pgPort: String? { ProcessInfo.processInfo.environment["TRACKER_TEST_PG_PORT"] }
    static var pgScript: String? { ProcessInfo.processInfo.environment["TRACKER_TEST_PG_SCRIPT"] }

    static var isAvailable: Bool { adminURL != nil && binary != nil }

    static let logger: Logger = {
        var l = Logger(label: "tracker.tests")
        l.logLevel = .critical
        return l
    }()

    /// Runs `scripts/pg.sh COMMAND DIR PORT` (start/stop a private cluster).
    static func postgres(_ command: String, dir: String, port: Int) async throws {
        let script = try #require(pgScript)
        let status = try await Subprocess.run(script, [command, dir, String(port)])
        try #require(status == 0, "pg.sh \(command) failed")
    }
}

/// A fresh database with the schema applied (or the `migrations` given), dropped when the test ends.
final class TestDatabase: Sendable {
    let name: String
    let url: String
    let pool: ConnectionPool
    private let admin: ConnectionPool

    init(adminURL: String? = TestEnvironment.adminURL, migrations: [Migration] = Migration.all) async throws {
        let adminURL = try #require(adminURL, "run the integration tests through scripts/test.sh")
        name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)
        let admin = ConnectionPool(conninfo: adminURL, maxConnections: 1, logger: TestEnvironment.logger)
        self.admin = admin
        let name = self.name
        try await Self.retryingConnects { try await admin.withConnection { try $0.execute("CREATE DATABASE \(name)") } }
        url = try #require(TestDatabase.url(adminURL, database: name))
        pool = ConnectionPool(conninfo: url, maxConnections: 4, logger: TestEnvironment.logger)
        let pool = self.pool
        _ = try await Self.retryingConnects { try await Migrator(migrations: migrations, logger: TestEnvironment.logger).migrate(pool) }
    }

    /// Runs `body` again when it could not connect: the suite's hundred tests start at once on
    /// one cluster, and on a loaded machine a connection's start can pass libpq's 3 s
    /// `connect_timeout`. What failed for another reason, or five times, is the test's failure.
    private static func retryingConnects<T>(_ body: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error as DatabaseError where error.code == .unavailable && attempt < 5 {
                attempt += 1
                TestEnvironment.logger.warning("test database: could not connect (\(error.serverMessage)); retrying")
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// `adminURL` with its database (the path after the host) replaced by `database`.
    static func url(_ adminURL: String, database: String) -> String? {
        guard let slash = adminURL.range(of: "/", options: .backwards), adminURL[..<slash.lowerBound].contains("@") else { return nil }
        return adminURL[..<slash.lowerBound] + "/" + database
    }

    func drop() async {
        pool.close()
        let name = self.name
        _ = try? await admin.withConnection { try $0.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        admin.close()
    }

    /// Runs a query and returns all its values as text.
    func rows(_ sql: String, _ parameters: [String?] = []) async throws -> [[String?]] {
        try await pool.withConnection { try $0.query(sql, parameters).rows }
    }

    func scalar(_ sql: String, _ parameters: [String?] = []) async throws -> String? {
        try await rows(sql, parameters).first?.first ?? nil
    }

    func createKey(_ name: String, scope: KeyScope) async throws -> String {
        try await APIKeys(pool: pool).create(name: name, scope: scope)
    }
}

/// Runs `body` with a fresh database, dropping it afterwards even when the test fails.
func withTestDatabase(migrations: [Migration] = Migration.all, _ body: (TestDatabase) async throws -> Void) async throws {
    let db = try await TestDatabase(migrations: migrations)
    do {
        try await body(db)
    } catch {
        await db.drop()
        throw error
    }
    await db.drop()
}

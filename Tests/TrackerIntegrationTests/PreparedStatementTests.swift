import Foundation
import Testing
import Tracker

/// `PreparedStatement`: prepared once per connection, run by name, prepared again when the
/// session lost it; and the typed advisory locks exclude each other across sessions.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct PreparedStatementTests {
    static let statement = PreparedStatement(name: "test_add", sql: "SELECT $1::int + $2::int")

    @Test func aStatementIsPreparedOnceAndRunByNameWithNewParameters() throws {
        let connection = try Connection.open(TestEnvironment.adminURL!)
        defer { connection.close() }
        #expect(try connection.query(Self.statement, [.text("1"), .text("2")]).string(0, 0) == "3")
        #expect(try connection.query(Self.statement, [.text("40"), .text("2")]).string(0, 0) == "42")
        let prepared = try connection.query("SELECT count(*) FROM pg_prepared_statements WHERE name = 'test_add'").string(0, 0)
        #expect(prepared == "1", "one prepared statement on the session, not one per run")
    }

    @Test func aStatementTheSessionLostIsPreparedAgain() throws {
        let connection = try Connection.open(TestEnvironment.adminURL!)
        defer { connection.close() }
        #expect(try connection.query(Self.statement, [.text("1"), .text("1")]).string(0, 0) == "2")
        try connection.execute("DEALLOCATE ALL")
        #expect(try connection.query(Self.statement, [.text("2"), .text("2")]).string(0, 0) == "4")
    }

    /// A migration that adds a column to a table a statement reads whole changes its result
    /// type: the statement is made anew, outside a transaction and after one it aborted.
    @Test func aStatementWhoseResultTypeChangedIsPreparedAgain() throws {
        let connection = try Connection.open(TestEnvironment.adminURL!)
        defer { connection.close() }
        let table = "prepared_\(UUID().uuidString.prefix(8).lowercased())"
        try connection.execute("CREATE TEMPORARY TABLE \(table) (a int); INSERT INTO \(table) VALUES (1)")
        let statement = PreparedStatement(name: "test_whole_\(table)", sql: "SELECT * FROM \(table)")
        #expect(try connection.query(statement, []).columnCount == 1)
        try connection.execute("ALTER TABLE \(table) ADD COLUMN b int DEFAULT 2")
        #expect(try connection.query(statement, []).columnCount == 2)
        try connection.execute("ALTER TABLE \(table) ADD COLUMN c int DEFAULT 3")
        try connection.execute("BEGIN")
        #expect(throws: DatabaseError.self) { try connection.query(statement, []) }
        try connection.execute("ROLLBACK")
        #expect(try connection.query(statement, []).columnCount == 3)
    }

    @Test func aFailedRunLeavesTheStatementUsable() throws {
        let connection = try Connection.open(TestEnvironment.adminURL!)
        defer { connection.close() }
        #expect(throws: DatabaseError.self) { try connection.query(Self.statement, [.text("2147483647"), .text("1")]) }
        #expect(try connection.query(Self.statement, [.text("5"), .text("5")]).string(0, 0) == "10")
    }

    @Test func anAdvisoryLockHeldByOneSessionIsRefusedToAnother() throws {
        let first = try Connection.open(TestEnvironment.adminURL!)
        let second = try Connection.open(TestEnvironment.adminURL!)
        defer { first.close(); second.close() }
        let name = "tracker.test.\(UUID().uuidString)"
        #expect(try first.tryLock(name))
        #expect(try !second.tryLock(name), "held by the first session")
        try first.unlock(name)
        #expect(try second.tryLock(name), "free once the first let it go")
        try second.unlock(name)
    }
}

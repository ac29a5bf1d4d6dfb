import Testing
@testable import Tracker

/// `tracker roles passwords` writes each role's connection from the owner's.
struct ConnectionStringTests {
    @Test func aURLKeepsItsHostsDatabaseAndParametersAndGetsTheRolesLogin() {
        let owner = "postgresql://owner:s3cret@db1:5432,db2:5433/tracker?sslmode=verify-full&target_session_attrs=read-write"
        #expect(ConnectionString.replacingLogin(of: owner, user: "tracker_ingest", password: "pw")
                == "postgresql://tracker_ingest:pw@db1:5432,db2:5433/tracker?sslmode=verify-full&target_session_attrs=read-write")
        #expect(ConnectionString.replacingLogin(of: "postgres://db/tracker", user: "tracker_report", password: "a/b@c:d%")
                == "postgres://tracker_report:a%2Fb%40c%3Ad%25@db/tracker")
        #expect(ConnectionString.replacingLogin(of: "postgresql://u@h?dbname=x", user: "r", password: "p") == "postgresql://r:p@h?dbname=x")
    }

    @Test func keyValuePairsGetTheRolesLoginAppendedQuoted() {
        #expect(ConnectionString.replacingLogin(of: "host=db dbname=tracker user=owner", user: "tracker_projector", password: "it's\\x")
                == "host=db dbname=tracker user=owner user='tracker_projector' password='it\\'s\\\\x'")
    }
}

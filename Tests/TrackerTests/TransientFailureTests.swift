import Testing
@testable import Tracker
import TrackerPostgres

/// What a database failure means for the client who asked (`DatabaseError.transience`), and the
/// answer an append gives for it: `503` with `Retry-After` when a retry may succeed.
struct TransientFailureTests {
    private func failure(_ state: SQLState?, in file: String? = nil, constraint: String? = nil) -> DatabaseError {
        DatabaseError(.queryFailed, sqlState: state?.rawValue, serverMessage: "(server text)", constraint: constraint, sourceFile: file)
    }

    @Test func aCopyToAShardWhoseWorkerWentAwayIsAnIOFailureWorthARetry() {
        // Citus: `failed to COPY to shard 102363 on 127.0.0.1:5433`.
        let error = failure(.ioError, in: "multi_copy.c")
        #expect(error.transience == .ioFailed)
        #expect(EventLog.classify(error) == .databaseUnavailable)
    }

    @Test func anXX000RaisedOnCitussConnectionToAWorkerMeansTheWorkerIsUnreachable() {
        // `failure on connection marked as essential: 127.0.0.1:5433` (remote_transaction.c),
        // libpq's `server closed the connection unexpectedly … while executing command on
        // 127.0.0.1:5433` relayed without a SQLSTATE (remote_commands.c), a worker's
        // `terminating connection due to administrator command` in the middle of a COPY
        // (multi_copy.c), in whatever language the servers speak.
        for file in ["remote_transaction.c", "remote_commands.c", "multi_copy.c", "intermediate_results.c"] {
            let error = failure(.internalError, in: file)
            #expect(error.transience == .workerUnreachable, "\(file)")
            #expect(EventLog.classify(error) == .databaseUnavailable, "\(file)")
        }
    }

    @Test func anXX000FromAnywhereElseIsNotTransient() {
        // An internal error of PostgreSQL or of Citus's planner, or one whose origin the server
        // did not send: a retry would meet it again.
        for file in ["relcache.c", "multi_physical_planner.c", nil] {
            let error = failure(.internalError, in: file)
            #expect(error.transience == nil, "\(file ?? "no file")")
            #expect(EventLog.classify(error) == .failed, "\(file ?? "no file")")
        }
    }

    @Test func aLostWorkerDuringThePlainAppendStillSendsTheGroupToTheConflictCheckingStatement() {
        // Any XX000 of the plain append may hide a stored id, so exactly-once keeps its route:
        // the conflict-checking statement stores exactly the new ids, or fails on its own terms.
        #expect(EventLogSQL.metStoredId(failure(.internalError, in: "remote_commands.c")))
        #expect(EventLogSQL.metStoredId(failure(.internalError, in: "multi_copy.c")))
        #expect(!EventLogSQL.metStoredId(failure(.ioError, in: "multi_copy.c")))
    }

    @Test func aConnectionThatBrokeOrCouldNotBeMadeIsLost() {
        #expect(DatabaseError(.unavailable, serverMessage: "server closed the connection unexpectedly").transience == .connectionLost)
        // Citus's `connection to the remote node … failed`, and the class as a whole.
        for code in ["08006", "08001", "08003"] {
            #expect(failure(SQLState(rawValue: code)).transience == .connectionLost, "\(code)")
        }
        #expect(failure(.idleSessionTimeout).transience == .connectionLost)
    }

    @Test func aServerShuttingDownOrStartingIsRestarting() {
        for state in [SQLState.adminShutdown, .crashShutdown, .cannotConnectNow] {
            #expect(failure(state).transience == .serverRestarting, "\(state)")
        }
    }

    @Test func theOtherPassingFailuresKeepTheirMeanings() {
        #expect(failure(SQLState(rawValue: "53300")).transience == .overloaded)  // too many connections
        #expect(DatabaseError(.poolExhausted, serverMessage: "").transience == .overloaded)
        #expect(failure(.serializationFailure).transience == .contention)
        #expect(failure(.deadlockDetected).transience == .contention)
        #expect(failure(.lockNotAvailable).transience == .contention)
        #expect(failure(.queryCanceled).transience == .cancelled)
        #expect(failure(.readOnlySQLTransaction).transience == .readOnlyServer)
    }

    @Test func failuresOfTheStatementOrItsDataAreNotTransient() {
        let refusals: [SQLState] = [.uniqueViolation, .checkViolation, .stringDataRightTruncation, .insufficientPrivilege,
                                    .undefinedObject, .programLimitExceeded, SQLState(rawValue: "57P04")]  // 57P04: database dropped
        for state in refusals {
            #expect(failure(state).transience == nil, "\(state)")
            #expect(EventLog.classify(failure(state)) == .failed, "\(state)")
        }
        #expect(DatabaseError(.unexpectedResult, serverMessage: "").transience == nil)
        #expect(EventLog.classify(DatabaseError(.poolClosed, serverMessage: "")) == .shuttingDown)
    }
}

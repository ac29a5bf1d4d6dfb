import Synchronization

/// The numbers of user agents in `user_agents`, which the log stores instead of the text.
///
/// A few distinct user agents make almost all traffic, so the numbers are remembered and a
/// group of events costs no statement once its agents are known. A client that sends a new
/// user agent with every request costs one statement per group (asynchronously committed) and
/// no memory beyond `capacity` remembered agents: the memory is emptied when it is full.
final class UserAgentNumbers: Sendable {
    private let known = Mutex<[String: Int32]>([:])
    let capacity: Int

    init(capacity: Int = 10_000) {
        self.capacity = capacity
    }

    /// The number of every agent of `agents`, adding the ones `user_agents` lacks.
    func numbers(for agents: Set<String>, on connection: Connection) throws -> [String: Int32] {
        guard !agents.isEmpty else { return [:] }
        var found: [String: Int32] = [:]
        var missing: [String] = []
        known.withLock { known in
            for agent in agents {
                if let n = known[agent] { found[agent] = n } else { missing.append(agent) }
            }
        }
        // Another writer adding the same agent at the same moment keeps it out of one answer;
        // a second statement, with a new snapshot, sees its row.
        for _ in 0..<3 where !missing.isEmpty {
            var texts = BinaryArray(.text, capacity: missing.count)
            for agent in missing { texts.append(agent) }
            let rows = try connection.transaction {
                // Not durable by itself: the events' commit that follows is, and flushes this too.
                try connection.execute("SET LOCAL synchronous_commit = off")
                return try connection.query(EventLogSQL.numberUserAgents, [texts.parameter])
            }
            var learnt: [String: Int32] = [:]
            for row in 0..<rows.rowCount {
                guard let text = rows.string(row, 1), let n = rows.int64(row, 0) else { continue }
                learnt[text] = Int32(truncatingIfNeeded: n)
            }
            found.merge(learnt) { a, _ in a }
            missing.removeAll { learnt[$0] != nil }
            known.withLock { known in
                if known.count + learnt.count > capacity { known.removeAll(keepingCapacity: true) }
                known.merge(learnt) { a, _ in a }
            }
        }
        guard missing.isEmpty else {
            throw DatabaseError(.unexpectedResult, serverMessage: "user_agents: \(missing.count) agent(s) got no number")
        }
        return found
    }
}

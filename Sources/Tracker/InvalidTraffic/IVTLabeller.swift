import Synchronization

/// The invalid-traffic rules of one rule set, compiled, and what they have learnt of user
/// agents: the labels an event's client earns (`declared_bot`, `datacenter`); `high_rate` is
/// `ClientMinutes`'s, `excessive_clicks` `AdContribution`'s.
///
/// A user agent is matched once, by its number, not once per event: the verdicts are kept,
/// at most `rememberedAgents` of them (emptied when full, so a client that sends a new user
/// agent with every request costs one match per agent and bounded memory). The matcher is a
/// lazy DFA whose work per byte is bounded whatever the user agent (`UserAgentMatcher`).
public final class IVTLabeller: Sendable {
    public let version: Int
    public let rules: IVTRuleSet
    private let ranges: IPRangeSet
    /// The matcher (not thread-safe: one user at a time) and the verdicts by agent number.
    private let state: Mutex<(matcher: UserAgentMatcher?, declaredBots: [Int32: Bool])>
    static let rememberedAgents = 100_000

    /// - Parameters:
    ///   - version: the rule set's number in `ivt_rule_sets`.
    ///   - rules: its rules.
    public init(version: Int, rules: IVTRuleSet) throws {
        self.version = version
        self.rules = rules
        let compiled = try rules.compiled()
        ranges = compiled.ipRanges
        state = Mutex((rules.userAgents.isEmpty ? nil : compiled.userAgents, [:]))
    }

    /// No rule applies to any event (version 0, or a rule set with nothing in it).
    public var labelsNothing: Bool {
        rules.userAgents.isEmpty && rules.ipRanges.isEmpty && rules.maxClicksPerAd == nil && rules.maxEventsPerClientMinute == nil
    }

    /// Whether events need their user agents' verdicts (the rule set has patterns).
    var matchesUserAgents: Bool { !rules.userAgents.isEmpty }

    /// Matches the user agents of `numbers` whose verdict is not known yet, reading their text
    /// from `user_agents`.
    func learn(userAgents numbers: Set<Int32>, on connection: Connection) throws {
        guard matchesUserAgents else { return }
        let unknown = state.withLock { s in numbers.filter { s.declaredBots[$0] == nil } }
        guard !unknown.isEmpty else { return }
        var ids = BinaryArray(.int4, capacity: unknown.count)
        for n in unknown { ids.append(n) }
        let rows = try connection.query(IVTLabellerSQL.agents, [ids.parameter], binaryResults: true)
        state.withLock { s in
            if s.declaredBots.count + rows.rowCount > Self.rememberedAgents { s.declaredBots.removeAll(keepingCapacity: true) }
            for row in 0..<rows.rowCount {
                guard let n = ByteReader.int32(rows.bytes(row, 0)) else { continue }
                s.declaredBots[n] = s.matcher?.matches(rows.bytes(row, 1)) ?? false
            }
        }
    }

    /// Matches every stored user agent and returns the numbers of those that match (a rebuild
    /// labels the whole log with one pass over `user_agents`).
    func declaredBots(on connection: Connection) throws -> Set<Int32> {
        guard matchesUserAgents else { return [] }
        var bots = Set<Int32>()
        let rows = try connection.query("SELECT id, user_agent FROM user_agents", [], binaryResults: true)
        state.withLock { s in
            for row in 0..<rows.rowCount where s.matcher?.matches(rows.bytes(row, 1)) == true {
                if let n = ByteReader.int32(rows.bytes(row, 0)) { bots.insert(n) }
            }
        }
        return bots
    }

    /// The label a client earns by its user agent and address, the first that applies:
    /// `declared_bot`, then `datacenter`. An agent not learnt yet counts as not declared.
    func label(userAgent: Int32?, address: IPAddress?) -> IVTLabel? {
        if let userAgent, matchesUserAgents, state.withLock({ $0.declaredBots[userAgent] }) == true { return .declaredBot }
        if let address, ranges.contains(address) { return .datacenter }
        return nil
    }

    /// Like `label(userAgent:address:)`, with the declared bots known in full (a rebuild).
    func label(userAgent: Int32?, address: IPAddress?, declaredBots: Set<Int32>) -> IVTLabel? {
        if let userAgent, declaredBots.contains(userAgent) { return .declaredBot }
        if let address, ranges.contains(address) { return .datacenter }
        return nil
    }
}

enum IVTLabellerSQL {
    /// Binary columns: 0 number (int4), 1 text.
    static let agents = "SELECT id, user_agent FROM user_agents WHERE id = ANY($1::int4[])"
}

extension ByteReader {
    /// A binary `int4`, or `nil` when the bytes are not 4.
    static func int32(_ bytes: UnsafeRawBufferPointer) -> Int32? {
        guard bytes.count == 4 else { return nil }
        return Int32(bitPattern: UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3]))
    }
}

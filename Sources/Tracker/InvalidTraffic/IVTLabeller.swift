import Synchronization

/// The invalid-traffic rules of one rule set, compiled, and what they have learnt of user
/// agents: the labels an event's client earns (`declared_bot`, `datacenter`); `high_rate` is
/// `ClientMinutes`'s, `excessive_clicks` `AdContribution`'s.
///
/// An app event is judged by the patterns less the rule set's app exemptions, a beacon by all
/// of them (`IVTRuleSet.patternIndices(for:)`): two matchers, one verdict per user agent for
/// both. A user agent is matched once, by its number, not once per event: the verdicts are
/// kept, at most `rememberedAgents` of them (emptied when full, so a client that sends a new
/// user agent with every request costs one match per agent and bounded memory). The matchers
/// are lazy DFAs whose work per byte is bounded whatever the user agent (`UserAgentMatcher`).
public final class IVTLabeller: Sendable {
    public let version: Int
    public let rules: IVTRuleSet
    private let ranges: IPRangeSet
    /// The matchers (not thread-safe: one user at a time) and the verdicts by agent number.
    /// `beacons` has every pattern (`nil`: there is none); `apps` the patterns less the
    /// exempted ones (`nil`: none is exempted, the verdict being the same).
    private let state: Mutex<(beacons: UserAgentMatcher?, apps: UserAgentMatcher?, verdicts: [Int32: DeclaredBot])>
    static let rememberedAgents = 100_000

    /// - Parameters:
    ///   - version: the rule set's number in `ivt_rule_sets`.
    ///   - rules: its rules.
    public init(version: Int, rules: IVTRuleSet) throws {
        self.version = version
        self.rules = rules
        let compiled = try rules.compiled()
        ranges = compiled.ipRanges
        let apps = try rules.appExemptions.isEmpty ? nil : rules.userAgentMatcher(for: .app)
        state = Mutex((rules.userAgents.isEmpty ? nil : compiled.userAgents, apps, [:]))
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
        let unknown = state.withLock { s in numbers.filter { s.verdicts[$0] == nil } }
        guard !unknown.isEmpty else { return }
        var ids = BinaryArray(.int4, capacity: unknown.count)
        for n in unknown { ids.append(n) }
        let rows = try connection.query(IVTLabellerSQL.agents, [ids.parameter], binaryResults: true)
        state.withLock { s in
            if s.verdicts.count + rows.rowCount > Self.rememberedAgents { s.verdicts.removeAll(keepingCapacity: true) }
            for row in 0..<rows.rowCount {
                guard let n = ByteReader.int32(rows.bytes(row, 0)) else { continue }
                s.verdicts[n] = Self.verdict(rows.bytes(row, 1), beacons: s.beacons, apps: s.apps)
            }
        }
    }

    /// Matches every stored user agent and returns the verdicts of those that match a pattern
    /// (a rebuild labels the whole log with one pass over `user_agents`).
    func declaredBots(on connection: Connection) throws -> [Int32: DeclaredBot] {
        guard matchesUserAgents else { return [:] }
        var bots: [Int32: DeclaredBot] = [:]
        let rows = try connection.query("SELECT id, user_agent FROM user_agents", [], binaryResults: true)
        state.withLock { s in
            for row in 0..<rows.rowCount {
                let verdict = Self.verdict(rows.bytes(row, 1), beacons: s.beacons, apps: s.apps)
                if verdict != .no, let n = ByteReader.int32(rows.bytes(row, 0)) { bots[n] = verdict }
            }
        }
        return bots
    }

    /// The verdict on one user agent's text, not remembered (what `learn` finds for a number).
    func verdict(_ userAgent: String) -> DeclaredBot {
        Array(userAgent.utf8).withUnsafeBytes { raw in state.withLock { Self.verdict(raw, beacons: $0.beacons, apps: $0.apps) } }
    }

    /// A user agent's verdict: the app matcher runs only on what every pattern matches.
    private static func verdict(_ userAgent: UnsafeRawBufferPointer, beacons: UserAgentMatcher?, apps: UserAgentMatcher?) -> DeclaredBot {
        guard beacons?.matches(userAgent) == true else { return .no }
        guard let apps else { return .everywhere }
        return apps.matches(userAgent) ? .everywhere : .inBeaconsOnly
    }

    /// The label a client earns by its user agent and address on `channel`, the first that
    /// applies: `declared_bot`, then `datacenter`. An agent not learnt yet counts as not declared.
    func label(userAgent: Int32?, address: IPAddress?, channel: EventChannel) -> IVTLabel? {
        if let userAgent, matchesUserAgents, state.withLock({ $0.verdicts[userAgent] })?.declares(channel) == true { return .declaredBot }
        if let address, ranges.contains(address) { return .datacenter }
        return nil
    }

    /// Like `label(userAgent:address:channel:)`, with the declared bots known in full (a rebuild).
    func label(userAgent: Int32?, address: IPAddress?, channel: EventChannel, declaredBots: [Int32: DeclaredBot]) -> IVTLabel? {
        if let userAgent, declaredBots[userAgent]?.declares(channel) == true { return .declaredBot }
        if let address, ranges.contains(address) { return .datacenter }
        return nil
    }
}

/// Where a user agent makes an event `declared_bot`. App events are judged by a subset of the
/// patterns beacons are, so a user agent declared in app events is declared in beacons too.
enum DeclaredBot: Sendable {
    /// No pattern matches it.
    case no
    /// Only an exempted pattern matches it: its beacons are labelled, its app events are not.
    case inBeaconsOnly
    /// A pattern that applies to app events matches it.
    case everywhere

    func declares(_ channel: EventChannel) -> Bool {
        switch self {
        case .no: false
        case .inBeaconsOnly: channel == .beacon
        case .everywhere: true
        }
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

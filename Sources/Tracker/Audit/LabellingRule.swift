/// The rule of a rule set that gave an event its invalid-traffic label: what the audit trail
/// names beside the label (`labelledBy`), so that a labelled event can be traced to the
/// pattern, range or limit behind it.
public enum LabellingRule: Sendable, Hashable {
    /// `declared_bot`: the first pattern, in the rule set's order, that applies to the event's
    /// channel and matches its user agent.
    case userAgent(UserAgentRule)
    /// `datacenter`: the first range, in the rule set's order, that holds its address.
    case ipRange(CIDRRange)
    /// `high_rate`: its client sent more events than this in the UTC minute.
    case maxEventsPerClientMinute(Int)
    /// `excessive_clicks`: its ad had this many counted clicks before it.
    case maxClicksPerAd(Int)

    /// `{"pattern": …}` (with the rule's `name` when it has one), `{"ipRange": …}`,
    /// `{"maxEventsPerClientMinute": N}` or `{"maxClicksPerAd": N}`: the rule set's own field
    /// names (docs/openapi.yaml, `LabellingRule`).
    var json: String {
        var out = "{"
        switch self {
        case .userAgent(let rule):
            out += "\"pattern\":"
            JSONText.appendQuoted(rule.pattern, to: &out)
            if let name = rule.name {
                out += ",\"name\":"
                JSONText.appendQuoted(name, to: &out)
            }
        case .ipRange(let range): out += "\"ipRange\":\"\(range)\""
        case .maxEventsPerClientMinute(let limit): out += "\"maxEventsPerClientMinute\":\(limit)"
        case .maxClicksPerAd(let limit): out += "\"maxClicksPerAd\":\(limit)"
        }
        return out + "}"
    }

    /// A few words for the command line: `pattern "Googlebot\/"`, `IP range 34.64.0.0/10`,
    /// `maxEventsPerClientMinute 120`, `maxClicksPerAd 5`.
    public var summary: String {
        switch self {
        case .userAgent(let rule):
            var quoted = ""
            JSONText.appendQuoted(rule.pattern, to: &quoted)
            return "pattern " + quoted + (rule.name.map { " (\($0))" } ?? "")
        case .ipRange(let range): return "IP range \(range)"
        case .maxEventsPerClientMinute(let limit): return "maxEventsPerClientMinute \(limit)"
        case .maxClicksPerAd(let limit): return "maxClicksPerAd \(limit)"
        }
    }

    /// The client of a logged event, as the rules judged it.
    struct Client {
        var userAgent: Int32?
        var address: IPAddress?
        var channel: EventChannel
    }

    /// The rule behind each event of `labels` whose client is known, under `rules` (the
    /// projections' rule set, which gave the labels). `excessive_clicks` is not among them: it
    /// is the ad's, not the client's (`rules.maxClicksPerAd`).
    static func rules(behind labels: [PackedUUID: IVTLabel], clients: [PackedUUID: Client], under rules: IVTRuleSet,
                      on connection: Connection) throws -> [PackedUUID: LabellingRule] {
        var agents = Set<Int32>()
        for (id, label) in labels where label == .declaredBot {
            if let agent = clients[id]?.userAgent { agents.insert(agent) }
        }
        var texts: [Int32: [UInt8]] = [:]
        if !agents.isEmpty {
            var ids = BinaryArray(.int4, capacity: agents.count)
            for n in agents { ids.append(n) }
            let rows = try connection.query(IVTLabellerSQL.agents, [ids.parameter], binaryResults: true)
            for row in 0..<rows.rowCount {
                if let n = ByteReader.int32(rows.bytes(row, 0)) { texts[n] = Array(rows.bytes(row, 1)) }
            }
        }
        // One search per user agent and channel (each compiles about twice the list).
        struct Search: Hashable {
            var agent: Int32
            var channel: EventChannel
        }
        var searched: [Search: UserAgentRule?] = [:]
        var out: [PackedUUID: LabellingRule] = [:]
        for (id, label) in labels {
            guard let client = clients[id] else { continue }
            switch label {
            case .declaredBot:
                guard let agent = client.userAgent, let text = texts[agent] else { continue }
                let search = Search(agent: agent, channel: client.channel)
                let rule: UserAgentRule?
                if let known = searched[search] {
                    rule = known
                } else {
                    rule = rules.declaringPattern(of: text, channel: client.channel)
                    searched[search] = .some(rule)
                }
                if let rule { out[id] = .userAgent(rule) }
            case .datacenter:
                guard let address = client.address, let range = rules.ipRanges.first(where: { $0.contains(address) }) else { continue }
                out[id] = .ipRange(range)
            case .highRate:
                if let limit = rules.maxEventsPerClientMinute { out[id] = .maxEventsPerClientMinute(limit) }
            case .excessiveClicks:
                continue
            }
        }
        return out
    }
}

/// One user-agent rule of a rule set: a pattern and, optionally, what to call it.
public struct UserAgentRule: Sendable, Hashable {
    /// A regular expression in `UserAgentMatcher`'s syntax.
    public var pattern: String
    /// A name for reports and audits (`googlebot`); `nil` for patterns read from a list.
    public var name: String?

    /// A rule.
    ///
    /// - Parameters:
    ///   - pattern: the regular expression, matched anywhere in the user agent, ignoring case.
    ///   - name: what to call it, if anything.
    public init(pattern: String, name: String? = nil) {
        self.pattern = pattern
        self.name = name
    }
}

/// Where an event came in, which decides the user-agent patterns that apply to it.
public enum EventChannel: Sendable, Hashable {
    /// `POST /v1/events`: sent by an app's own HTTP client, with that client's user agent.
    case app
    /// `GET /v1/pixel.gif` or `/v1/click`: fetched by a browser, with the browser's user agent.
    case beacon
}

/// A user-agent pattern that does not apply to app events, and why.
///
/// Crawler lists are made for traffic that browsers send: they name the default user agents
/// of HTTP client libraries (`okhttp`, `^curl`, `python-requests`), which a crawler that does
/// not say its name sends. An app's events are sent by its own HTTP client, often with that
/// default, so such a pattern would label every event of the app; beacons, fetched by
/// browsers, keep it.
public struct AppExemption: Sendable, Hashable {
    /// A pattern of the rule set, exactly as written there.
    public var pattern: String
    /// Why it does not apply to app events, for `tracker ivt show`.
    public var reason: String

    /// An exemption.
    ///
    /// - Parameters:
    ///   - pattern: the pattern, as the rule set writes it.
    ///   - reason: why app events are not judged by it.
    public init(pattern: String, reason: String) {
        self.pattern = pattern
        self.reason = reason
    }
}

/// A general-invalid-traffic rule set (PROTOCOL.md 8): what labels an event `declared_bot`,
/// `datacenter`, `high_rate` or `excessive_clicks`.
///
/// Made from an activation document by `parse(_:readFile:)` (the files it names are read
/// then, and inlined), stored as `storedDocument`, read back by `parseStored(_:)`. Version 0
/// is `empty`, which labels nothing.
public struct IVTRuleSet: Sendable, Equatable {
    /// Free text saying what the rule set is (`crawler-user-agents 1.67.0`).
    public var name: String?
    /// Every user-agent pattern: the document's own, then each list's in order.
    public var userAgents: [UserAgentRule]
    /// Patterns of `userAgents` that app events are not judged by (beacons are, by all).
    public var appExemptions: [AppExemption]
    /// Every data-center range: the document's own, then each file's in order.
    public var ipRanges: [CIDRRange]
    /// Clicks of one ad counted before the rest are `excessive_clicks`; `nil`: rule off.
    public var maxClicksPerAd: Int?
    /// Events of one IP, user agent and UTC minute allowed before all are `high_rate`; `nil`: rule off.
    public var maxEventsPerClientMinute: Int?
    /// The files that were read into it, as the document named them, for the record.
    public var sources: [String]

    /// A rule set.
    ///
    /// - Parameters:
    ///   - name: what the rule set is, free text.
    ///   - userAgents: the user-agent patterns.
    ///   - appExemptions: the patterns app events are not judged by.
    ///   - ipRanges: the data-center ranges.
    ///   - maxClicksPerAd: the excessive-clicks limit, or `nil`.
    ///   - maxEventsPerClientMinute: the high-rate limit, or `nil`.
    ///   - sources: the files read into it.
    public init(name: String? = nil, userAgents: [UserAgentRule] = [], appExemptions: [AppExemption] = [], ipRanges: [CIDRRange] = [],
                maxClicksPerAd: Int? = nil, maxEventsPerClientMinute: Int? = nil, sources: [String] = []) {
        self.name = name
        self.userAgents = userAgents
        self.appExemptions = appExemptions
        self.ipRanges = ipRanges
        self.maxClicksPerAd = maxClicksPerAd
        self.maxEventsPerClientMinute = maxEventsPerClientMinute
        self.sources = sources
    }

    /// Version 0: no pattern, no range, no limit; it labels nothing.
    public static let empty = IVTRuleSet()

    /// Whether the rule set labels nothing.
    public var isEmpty: Bool {
        userAgents.isEmpty && ipRanges.isEmpty && maxClicksPerAd == nil && maxEventsPerClientMinute == nil
    }

    /// The largest limit a rule may set (PostgreSQL's `integer`).
    public static let maxLimit = Int(Int32.max)

    /// The positions in `userAgents` of the patterns that apply to events of `channel`: every
    /// one to beacons, all but the exempted ones to app events.
    public func patternIndices(for channel: EventChannel) -> [Int] {
        guard channel == .app, !appExemptions.isEmpty else { return Array(userAgents.indices) }
        let exempted = Set(appExemptions.map(\.pattern))
        return userAgents.indices.filter { !exempted.contains(userAgents[$0].pattern) }
    }

    /// The patterns that apply to events of `channel`, compiled into one matcher (one per
    /// thread: see `UserAgentMatcher`).
    ///
    /// - Throws: `RuleSetError.invalidPattern` naming the first pattern that cannot be used.
    public func userAgentMatcher(for channel: EventChannel) throws(RuleSetError) -> UserAgentMatcher {
        let indices = patternIndices(for: channel)
        do {
            return try UserAgentMatcher(patterns: indices.map { userAgents[$0].pattern })
        } catch {
            throw .invalidPattern(location: "userAgents[\(indices[error.index])]", error)
        }
    }

    /// The first pattern (in `userAgents` order) that applies to events of `channel` and
    /// matches `userAgent`: the one an audit names for a `declared_bot` label. `nil` when none
    /// does, or the patterns do not compile.
    ///
    /// Found by halving: a matcher of the first half of the candidates, then of the half of
    /// that half where the first match lies, so the cost is about twice one compilation of the
    /// whole list, not one per pattern.
    public func declaringPattern(of userAgent: some Collection<UInt8>, channel: EventChannel) -> UserAgentRule? {
        let indices = patternIndices(for: channel)
        func anyMatches(_ range: Range<Int>) -> Bool {
            (try? UserAgentMatcher(patterns: indices[range].map { userAgents[$0].pattern }))?.matches(userAgent) ?? false
        }
        guard !indices.isEmpty, anyMatches(0..<indices.count) else { return nil }
        // A pattern of lower..<upper matches; none before lower does.
        var (lower, upper) = (0, indices.count)
        while upper - lower > 1 {
            let middle = (lower + upper) / 2
            if anyMatches(lower..<middle) { upper = middle } else { lower = middle }
        }
        return userAgents[indices[lower]]
    }

    /// The data-center ranges as one set to look addresses up in.
    public var ipRangeSet: IPRangeSet { IPRangeSet(ipRanges) }

    /// Every pattern (those beacons are judged by) and the ranges, compiled.
    ///
    /// - Throws: `RuleSetError.invalidPattern` naming the first pattern that cannot be used.
    public func compiled() throws(RuleSetError) -> (userAgents: UserAgentMatcher, ipRanges: IPRangeSet) {
        (try userAgentMatcher(for: .beacon), ipRangeSet)
    }
}

/// Why a rule set is refused; the description says exactly where and what.
public enum RuleSetError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The document, or a file it names, is not JSON. `source` is `the document` or
    /// `userAgentLists[0] (bots.json)`.
    case notJSON(source: String, JSONSyntaxError)
    /// A value is not of the JSON type its field needs.
    case wrongType(location: String, expected: String, got: String)
    /// A member the document may not have (a typo must not silently turn a rule off).
    case unknownField(location: String, name: String, allowed: [String])
    /// A member given twice.
    case repeatedField(location: String, name: String)
    /// A required member is missing (`pattern` of a user-agent rule).
    case missingField(location: String, name: String)
    /// A pattern `UserAgentMatcher` cannot use.
    case invalidPattern(location: String, PatternError)
    /// An app exemption names a pattern the rule set does not have.
    case notAPattern(location: String, pattern: String)
    /// An app exemption names a pattern an earlier one (`first`) names already.
    case repeatedExemption(location: String, pattern: String, first: String)
    /// A range that is not CIDR.
    case invalidRange(location: String, CIDRRangeError)
    /// A limit that is not an integer in 1...`IVTRuleSet.maxLimit`; `got` is its JSON text.
    case notPositiveInteger(field: String, got: String)
    /// `readFile` failed for a file the document names.
    case unreadableFile(location: String, reason: String)
    /// A file of ranges is not UTF-8 text.
    case notText(location: String)

    /// Where and what: `ipRanges[2]: "10.0.0.0/33" is not a CIDR range (prefix 0...32 for IPv4)`.
    public var description: String {
        switch self {
        case .notJSON(let source, let error): "\(source) is not JSON: \(error)"
        case .wrongType(let location, let expected, let got): "\(location) must be \(expected), got \(got)"
        case .unknownField(let location, let name, let allowed):
            "unknown field \(Self.quoted(name))" + (location.isEmpty ? "" : " in \(location)")
                + "; the fields are \(allowed.joined(separator: ", "))"
        case .repeatedField(let location, let name): "field \(Self.quoted(name)) given twice" + (location.isEmpty ? "" : " in \(location)")
        case .missingField(let location, let name): "\(location) has no \(Self.quoted(name))"
        case .invalidPattern(let location, let error): "\(location): \(error.patternDescription)"
        case .notAPattern(let location, let pattern):
            "\(location): \(Self.quoted(pattern)) is none of the rule set's user-agent patterns (userAgents and userAgentLists); "
                + "an exemption names one exactly as written there"
        case .repeatedExemption(let location, let pattern, let first): "\(location): \(Self.quoted(pattern)) is exempted already by \(first)"
        case .invalidRange(let location, let error): "\(location): \(error)"
        case .notPositiveInteger(let field, let got): "\(field) must be a positive integer up to \(IVTRuleSet.maxLimit), got \(got)"
        case .unreadableFile(let location, let reason): "\(location) cannot be read: \(reason)"
        case .notText(let location): "\(location) is not UTF-8 text"
        }
    }

    static func quoted(_ s: String) -> String {
        var out = ""
        JSONText.appendQuoted(s, to: &out)
        return out
    }
}

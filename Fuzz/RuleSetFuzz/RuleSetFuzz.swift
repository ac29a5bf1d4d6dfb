import TrackerInput

/// libFuzzer's entry point: one input is an activation document and the files it may name,
/// separated by NUL bytes (which JSON text cannot hold): `document NUL list.json NUL
/// ranges.txt`. `readFile` serves `list.json` and `ranges.txt` from those parts (an empty list
/// when absent) and refuses any other name. The whole input is also read as a stored document.
///
/// Besides crashes and hangs, it checks what PROTOCOL.md 8 and the rule set promise: a refusal says
/// why; an accepted rule set compiles, its stored document is the same bytes every time and
/// reads back equal; on the input itself as a user agent, the matcher of all patterns answers
/// as the patterns alone do and as one with a two-state cache does, within its cache cap and
/// its documented work per byte; the range set holds every range's first address.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRuleSet(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let parts = input.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false).map(Array.init)
    let files: [String: [UInt8]] = [
        "list.json": parts.count > 1 ? parts[1] : Array("[]".utf8),
        "ranges.txt": parts.count > 2 ? parts[2] : [],
    ]
    struct NoSuchFile: Error {}
    var accepted: IVTRuleSet?
    do {
        let rules = try IVTRuleSet.parse(parts.first ?? []) { name in
            guard let bytes = files[name] else { throw NoSuchFile() }
            return bytes
        }
        check(rules, userAgent: input)
        accepted = rules
    } catch {
        precondition(!error.description.isEmpty, "a refused rule set must say why")
    }
    do {
        // Without a NUL or a file field the input is often the same rule set again: checked once.
        let stored = try IVTRuleSet.parseStored(input)
        if stored != accepted { check(stored, userAgent: input) }
    } catch {
        precondition(!error.description.isEmpty, "a refused stored rule set must say why")
    }
    return 0
}

/// The properties of an accepted rule set.
func check(_ rules: IVTRuleSet, userAgent: [UInt8]) {
    let stored = rules.storedDocument
    precondition(stored == rules.storedDocument, "the stored document is not deterministic")
    let back: IVTRuleSet
    do {
        back = try IVTRuleSet.parseStored(Array(stored.utf8))
    } catch {
        preconditionFailure("the stored document does not read back: \(error)")
    }
    precondition(back == rules, "the stored document reads back as another rule set")
    precondition(back.storedDocument == stored)
    precondition(rules.maxClicksPerAd.map { $0 >= 1 } ?? true && rules.maxEventsPerClientMinute.map { $0 >= 1 } ?? true)
    let compiled: (userAgents: UserAgentMatcher, ipRanges: IPRangeSet)
    do {
        compiled = try rules.compiled()
    } catch {
        preconditionFailure("an accepted rule set does not compile: \(error)")
    }
    for range in rules.ipRanges {
        precondition(compiled.ipRanges.contains(range.network), "\(range) is not in its own set")
    }
    // The input as a hostile user agent, a browser's, and the empty one. On the input's first
    // 64 bytes and the empty one, the answer must be that of each pattern alone and of a
    // matcher whose cache holds two states (emptied at almost every byte); longer inputs would
    // only multiply the cost of each execution.
    let matcher = compiled.userAgents
    let patterns = rules.userAgents.map(\.pattern)
    let alone = patterns.count <= 8 ? patterns.compactMap { try? UserAgentMatcher(patterns: [$0]) } : []
    precondition(patterns.count > 8 || alone.count == patterns.count, "a pattern of an accepted rule set does not compile alone")
    let tiny: UserAgentMatcher
    do {
        tiny = try UserAgentMatcher(patterns: patterns, maxCachedStates: 2, maxCacheBytes: 1 << 16)
    } catch {
        preconditionFailure("an accepted rule set does not compile with a small cache: \(error)")
    }
    let browser = Array("Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 Version/17.6 Mobile Safari/604.1".utf8)
    var calls = 0
    // A fresh matcher builds a state for almost every byte of a novel user agent, and under the
    // sanitizers each costs tens of microseconds (thousands of instructions, for counted
    // repetitions): it reads 256 bytes (64 for such an automaton), so that an execution takes
    // milliseconds; every byte goes through the same code.
    let limit = matcher.instructionCount <= 2_000 ? 256 : 64
    for ua in [Array(userAgent.prefix(limit)), Array(userAgent.prefix(64)), browser, []] {
        let answer = matcher.matches(ua)
        calls += 1
        guard ua.count <= 64 else { continue }
        precondition(tiny.matches(ua) == answer, "a small cache changes the answer")
        if patterns.count <= 8 {
            precondition(alone.contains { $0.matches(ua) } == answer, "the patterns together answer otherwise than each alone")
        }
    }
    precondition(matcher.cachedStates <= UserAgentMatcher.maxCachedStates && tiny.cachedStates <= 2, "a DFA cache outgrew its cap")
    // The work bound UserAgentMatcher documents: three walks over the NFA per byte, two per call.
    for m in [matcher, tiny] {
        let s = m.statistics
        precondition(s.instructionsVisited <= (3 * s.bytesScanned + 2 * calls) * m.instructionCount, "more work than the bound: \(s)")
    }
    if rules.userAgents.isEmpty {
        precondition(!matcher.matches(userAgent.prefix(limit)), "no pattern matched")
    }
    // App events are judged by the patterns less the exemptions: nothing beacons' patterns do not
    // match, and the audit's pattern search agrees with the matcher of each channel.
    let app: UserAgentMatcher
    do {
        app = try rules.userAgentMatcher(for: .app)
    } catch {
        preconditionFailure("an accepted rule set's app patterns do not compile: \(error)")
    }
    let short = Array(userAgent.prefix(64))
    let forApps = app.matches(short)
    precondition(!forApps || matcher.matches(short), "an app exemption added a match")
    if patterns.count <= 8 {
        precondition((rules.declaringPattern(of: short, channel: .app) != nil) == forApps, "the app pattern search disagrees")
        precondition((rules.declaringPattern(of: short, channel: .beacon) != nil) == matcher.matches(short), "the beacon pattern search disagrees")
    }
}

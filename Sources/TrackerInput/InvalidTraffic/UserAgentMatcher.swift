/// Whether a user agent matches any of a list of patterns (PROTOCOL.md 8's `declared_bot`), in time
/// linear in the user agent whatever it holds.
///
/// The user agent is chosen by anyone holding the public ingest key, so no backtracking: the
/// patterns are compiled together into one Thompson NFA (their alternation, searched
/// anywhere in the user agent) and run as a lazy DFA, RE2's way. DFA states are built on
/// demand from the NFA and cached with their transitions; the cache holds at most
/// `maxCachedStates` states and about `maxCacheBytes` bytes, and is emptied when full, so
/// memory is bounded and a hostile stream of user agents costs at worst a rebuilt state per
/// byte. Scanning stops as soon as a match is certain (or none can follow).
///
/// **Work per byte.** A byte whose transition is cached costs one table look-up. One that is
/// not costs one DFA state: walks over the NFA that visit each instruction at most three times
/// (the step from the current state; the check of `$` at the end; and, once per byte class per
/// cache lifetime, the step from every pattern's start), then sorting and hashing the state's
/// instruction list: O(m log m) for an NFA of m instructions, whatever the bytes are. Each call
/// adds at most two walks for its initial state. `statistics` counts this work. A state stores
/// only the instructions beyond every pattern's start (which every state holds, the search
/// being unanchored), so in practice a new state costs what the patterns in progress hold, not
/// what the whole list does.
///
/// **Syntax** (that of the `crawler-user-agents` list, a subset JavaScript and PCRE agree on):
/// literals; `.` (any byte but line feed and carriage return); escapes `\d \D \w \W \s \S`,
/// `\t \n \v \f \r \0`, `\xHH` and `\uHHHH` below 0x80, and any escaped punctuation (`\/ \. \(
/// \- \\`); classes `[...]` with ranges, negation and those escapes; groups `( )`, `(?: )` and
/// named ones; alternation `|`; quantifiers `* + ? {m} {m,} {m,n}` (counts up to 1000), lazy
/// ones (`*?`) read as greedy since only whether it matches counts; anchors `^ $` at the start
/// and end of the user agent; a leading `(?i)`. A `{` that starts no quantifier is a literal.
/// Refused, naming the pattern: backreferences, lookaround, atomic groups, possessive
/// quantifiers, other inline flags, `\b`, Unicode property escapes, `[]`, POSIX classes,
/// non-ASCII characters, a pattern that matches the empty string (it would match every user
/// agent), groups nested deeper than 64, a pattern expanding to more than 10 000 NFA
/// instructions and patterns together expanding to more than `maxInstructions`.
///
/// **Case and bytes.** Matching ignores the case of ASCII letters, as PROTOCOL.md 8 says.
/// The user agent is read as bytes: a non-ASCII character is several bytes, each matched only
/// by `.`, a negated class, `\D`, `\W` or `\S`, so a pattern that counts characters (`a.b`)
/// counts bytes there; invalid UTF-8 is matched like any other bytes.
///
/// Not `Sendable`: the cache changes as it matches. Keep one per thread or task (building one
/// for the whole crawler list takes milliseconds).
public final class UserAgentMatcher {
    /// The most DFA states the cache holds before it is emptied.
    public static let maxCachedStates = 10_000
    /// About the most bytes the cache's states and transitions take before it is emptied.
    public static let maxCacheBytes = 8 << 20
    /// The most NFA instructions all patterns together may expand to.
    public static let maxInstructions = 200_000

    /// What a matcher has done, for tests and benchmarks.
    package struct Statistics: Sendable, Equatable {
        /// Bytes of user agents read.
        package var bytesScanned = 0
        /// DFA states built (each costs a walk over the NFA).
        package var statesBuilt = 0
        /// NFA instructions visited while building states: the matcher's real work.
        package var instructionsVisited = 0
        /// Times the cache was full and emptied.
        package var cacheFlushes = 0
    }

    private let program: Program
    private var walker: Walker

    // The DFA cache.
    private struct StateKey: Hashable {
        var pcs: [Int32]
        var initial: Bool
    }
    private var statePCs: [[Int32]] = []
    private var stateFlags: [UInt8] = []
    private static let matchFlag: UInt8 = 1, endFlag: UInt8 = 2, deadFlag: UInt8 = 4
    /// `state * classCount + class` → next state, or -1 when not built yet.
    private var transitions: [Int32] = []
    private var stateIndex: [StateKey: Int32] = [:]
    /// Per class, the closure of the step from `alwaysOn`, built on demand.
    private var fromAlwaysOn: [[Int32]?]
    private var initialState: Int32 = -1
    private var cacheBytes = 0
    private let stateLimit: Int
    private let byteLimit: Int
    private var counters = Statistics()

    /// Compiles `patterns` into one matcher; refuses the first pattern it cannot use.
    ///
    /// - Parameters:
    ///   - patterns: regular expressions in the syntax above, matched anywhere in the user
    ///     agent, ignoring case.
    /// - Throws: `PatternError`, naming the pattern by index and text, what is wrong and at
    ///   which offset.
    public convenience init(patterns: [String]) throws(PatternError) {
        try self.init(patterns: patterns, maxCachedStates: Self.maxCachedStates, maxCacheBytes: Self.maxCacheBytes)
    }

    /// The same with other cache limits (tests use small ones to exercise flushing).
    package init(patterns: [String], maxCachedStates: Int, maxCacheBytes: Int) throws(PatternError) {
        var builder = NFABuilder()
        var entries: [Int32] = []
        var total = 0
        for (i, pattern) in patterns.enumerated() {
            let node: PatternNode
            do {
                node = try PatternParser.parse(pattern)
            } catch {
                throw PatternError(index: i, pattern: pattern, offset: error.offset, problem: error.problem)
            }
            total += node.instructionCount
            guard total <= Self.maxInstructions else {
                throw PatternError(index: i, pattern: pattern, offset: nil, problem: .allPatternsTooLarge(limit: Self.maxInstructions))
            }
            entries.append(builder.compile(node, next: Program.matchPC))
        }
        var program = Program(builder, entries: entries)
        var walker = Walker(size: program.ops.count)
        // A pattern that matches the empty string at the start or at the end of any input.
        for (i, entry) in entries.enumerated() {
            if walker.reachesMatch(program, from: [entry], atStart: true, acrossEnd: false)
                || walker.reachesMatch(program, from: [entry], atStart: false, acrossEnd: true) {
                throw PatternError(index: i, pattern: patterns[i], offset: nil, problem: .matchesEverything)
            }
        }
        walker.begin()
        for entry in entries { walker.walk(program, from: entry, atStart: false, acrossEnd: false) }
        program.setAlwaysOn(walker.found.sorted())
        walker.visited = 0
        self.program = program
        self.walker = walker
        stateLimit = max(1, maxCachedStates)
        byteLimit = maxCacheBytes
        fromAlwaysOn = Array(repeating: nil, count: program.classCount)
    }

    /// How many DFA states the cache holds now (at most `maxCachedStates`).
    public var cachedStates: Int { statePCs.count }

    /// The NFA's size: the `m` of the work bound above.
    package var instructionCount: Int { program.ops.count }

    /// What the matcher has done since it was made.
    package var statistics: Statistics {
        var s = counters
        s.instructionsVisited = walker.visited
        return s
    }

    /// Whether any pattern matches anywhere in the user agent, ignoring ASCII case.
    ///
    /// - Parameters:
    ///   - userAgent: its bytes (UTF-8, as received; any bytes are matched).
    public func matches(_ userAgent: some Collection<UInt8>) -> Bool {
        if let result = userAgent.withContiguousStorageIfAvailable({ matches(buffer: $0) }) { return result }
        return Array(userAgent).withUnsafeBufferPointer { matches(buffer: $0) }
    }

    /// Whether any pattern matches anywhere in the user agent, ignoring ASCII case, reading
    /// the bytes where they are (a database row's value).
    ///
    /// - Parameters:
    ///   - userAgent: its bytes.
    public func matches(_ userAgent: UnsafeRawBufferPointer) -> Bool {
        userAgent.withMemoryRebound(to: UInt8.self) { matches(buffer: $0) }
    }

    /// Whether any pattern matches anywhere in `userAgent`, ignoring ASCII case.
    ///
    /// - Parameters:
    ///   - userAgent: the user agent as text.
    public func matches(_ userAgent: String) -> Bool {
        var text = userAgent
        return text.withUTF8 { matches(buffer: $0) }
    }

    private func matches(buffer: UnsafeBufferPointer<UInt8>) -> Bool {
        if initialState < 0 {
            walker.begin()
            for entry in program.entries { walker.walk(program, from: entry, atStart: true, acrossEnd: false) }
            initialState = addState(walker.found.sorted(), initial: true)
        }
        var state = initialState
        var flags = stateFlags[Int(state)]
        var scanned = 0
        defer { counters.bytesScanned += scanned }
        let classCount = program.classCount
        for byte in buffer {
            if flags & (Self.matchFlag | Self.deadFlag) != 0 { break }
            scanned += 1
            let cls = Int(program.classOf[Int(byte)])
            var next = transitions[Int(state) * classCount + cls]
            if next < 0 { next = buildTransition(from: state, on: cls) }
            state = next
            flags = stateFlags[Int(state)]
        }
        if flags & Self.matchFlag != 0 { return true }
        if flags & Self.deadFlag != 0 { return false }
        return flags & Self.endFlag != 0
    }

    // MARK: Building states

    /// The state after `state` on a byte of class `cls`, cached unless the cache was emptied
    /// meanwhile (then `state` is gone and the new state is the first of a fresh cache).
    private func buildTransition(from state: Int32, on cls: Int) -> Int32 {
        let current = statePCs[Int(state)]
        let flushes = counters.cacheFlushes
        let fromStart = stepFromAlwaysOn(cls)
        walker.step(program, from: current, on: cls, adding: fromStart)
        let next = addState(walker.found.sorted(), initial: false)
        if counters.cacheFlushes == flushes {
            transitions[Int(state) * program.classCount + cls] = next
        }
        return next
    }

    /// The closure of the step from `alwaysOn` on class `cls` (without `alwaysOn` itself).
    private func stepFromAlwaysOn(_ cls: Int) -> [Int32] {
        if let known = fromAlwaysOn[cls] { return known }
        walker.step(program, from: program.alwaysOn, on: cls, adding: [])
        let step = walker.found.sorted()
        let cost = step.count * 4
        if cacheBytes + cost > byteLimit { flush() }
        cacheBytes += cost
        fromAlwaysOn[cls] = step
        return step
    }

    /// The index of the state holding `pcs` (beyond `alwaysOn`), adding it if new.
    private func addState(_ pcs: [Int32], initial: Bool) -> Int32 {
        let key = StateKey(pcs: pcs, initial: initial)
        if let known = stateIndex[key] { return known }
        let cost = pcs.count * 4 + program.classCount * 4 + 128
        if statePCs.count >= stateLimit || cacheBytes + cost > byteLimit { flush() }
        var flags: UInt8 = 0
        if pcs.first == Program.matchPC { flags |= Self.matchFlag }
        var consumes = program.alwaysOnConsumes
        var pending = program.alwaysOnPending
        for pc in pcs {
            switch program.ops[Int(pc)] {
            case .byte: consumes = true
            case .assertEnd: pending.append(pc)
            default: break
            }
        }
        if !pending.isEmpty, walker.reachesMatch(program, from: pending, atStart: initial, acrossEnd: true) { flags |= Self.endFlag }
        if flags == 0, !consumes { flags |= Self.deadFlag }
        let index = Int32(statePCs.count)
        statePCs.append(pcs)
        stateFlags.append(flags)
        transitions.append(contentsOf: repeatElement(-1, count: program.classCount))
        stateIndex[key] = index
        cacheBytes += cost
        counters.statesBuilt += 1
        return index
    }

    /// Empties the cache: every state, transition and step from `alwaysOn`.
    private func flush() {
        statePCs.removeAll()
        stateFlags.removeAll()
        transitions.removeAll()
        stateIndex.removeAll()
        for i in fromAlwaysOn.indices { fromAlwaysOn[i] = nil }
        initialState = -1
        cacheBytes = 0
        counters.cacheFlushes += 1
    }
}

/// The compiled patterns: the NFA as parallel arrays indexed by instruction, the byte
/// classes, and what every DFA state holds implicitly.
private struct Program {
    enum Op: UInt8 { case byte, split, assertStart, assertEnd, match }
    /// Instruction 0 is the one `match`.
    static let matchPC: Int32 = 0

    let ops: [Op]
    /// byte, assertStart, assertEnd: the next instruction; split: the first branch.
    let out1: [Int32]
    /// split: the second branch; byte: its byte set's index.
    let out2: [Int32]
    /// Each pattern's first instruction.
    let entries: [Int32]

    /// The byte alphabet compressed to classes of bytes that no pattern tells apart.
    let classOf: [UInt8]
    let classCount: Int
    /// Per byte set, 4 words of bits over the classes it accepts.
    let setClasses: [UInt64]

    /// What every state holds implicitly: the patterns' starts, away from the input's start
    /// (the unanchored search's `.*` prefix). States store only what they hold beyond it.
    private(set) var alwaysOn: [Int32] = []
    private(set) var isAlwaysOn: [Bool]
    private(set) var alwaysOnConsumes = false
    /// The `$` instructions of `alwaysOn`.
    private(set) var alwaysOnPending: [Int32] = []

    init(_ builder: NFABuilder, entries: [Int32]) {
        ops = builder.ops.map { Op(rawValue: $0) ?? .match }
        out1 = builder.out1
        out2 = builder.out2
        self.entries = entries
        (classOf, classCount, setClasses) = Self.byteClasses(builder.sets)
        isAlwaysOn = Array(repeating: false, count: builder.ops.count)
    }

    mutating func setAlwaysOn(_ pcs: [Int32]) {
        alwaysOn = pcs
        for pc in pcs { isAlwaysOn[Int(pc)] = true }
        alwaysOnConsumes = pcs.contains { ops[Int($0)] == .byte }
        alwaysOnPending = pcs.filter { ops[Int($0)] == .assertEnd }
    }

    func accepts(_ pc: Int32, _ cls: Int) -> Bool {
        let set = Int(out2[Int(pc)])
        return setClasses[set * 4 + cls >> 6] >> UInt64(cls & 63) & 1 != 0
    }

    /// Splits the 256 bytes into classes no byte set tells apart, and says which classes each
    /// set accepts.
    private static func byteClasses(_ sets: [ByteSet]) -> (classOf: [UInt8], count: Int, setClasses: [UInt64]) {
        var classOf = [Int](repeating: 0, count: 256)
        var count = 1
        for set in sets {
            // (old class, in set) → new class, numbered in order of first appearance.
            var renumber = [Int](repeating: -1, count: 2 * count)
            var next = 0
            for b in 0..<256 {
                let slot = classOf[b] * 2 + (set.contains(UInt8(b)) ? 1 : 0)
                if renumber[slot] < 0 {
                    renumber[slot] = next
                    next += 1
                }
                classOf[b] = renumber[slot]
            }
            count = next
        }
        var representative = [Int](repeating: 0, count: count)
        for b in (0..<256).reversed() { representative[classOf[b]] = b }
        var bits = [UInt64](repeating: 0, count: sets.count * 4)
        for (i, set) in sets.enumerated() {
            for cls in 0..<count where set.contains(UInt8(representative[cls])) {
                bits[i * 4 + cls >> 6] |= 1 << UInt64(cls & 63)
            }
        }
        return (classOf.map { UInt8($0) }, count, bits)
    }
}

/// Scratch for walks over the NFA: marks that say what one walk has visited (a generation
/// number per instruction, so starting a walk costs nothing), its stack and what it found.
/// A value type, so that a walk's loop touches local memory only.
private struct Walker {
    private var marks: [UInt32]
    private var generation: UInt32 = 0
    private var stack: [Int32] = []
    /// What the current walk found.
    private(set) var found: [Int32] = []
    /// Instructions visited by every walk so far.
    var visited = 0

    init(size: Int) {
        marks = Array(repeating: 0, count: size)
    }

    /// Starts a new walk: nothing marked, nothing found.
    mutating func begin() {
        generation &+= 1
        if generation == 0 {
            for i in marks.indices { marks[i] = 0 }
            generation = 1
        }
        found.removeAll(keepingCapacity: true)
    }

    /// Adds to `found` every instruction a state keeps (bytes, `$`, the match) reachable from
    /// `start` without reading a byte and not yet marked in this walk, except `alwaysOn` ones.
    /// `^` is passed only `atStart`; `$` only `acrossEnd` (then it is not kept).
    mutating func walk(_ program: Program, from start: Int32, atStart: Bool, acrossEnd: Bool) {
        stack.append(start)
        while let pc = stack.popLast() {
            let i = Int(pc)
            if marks[i] == generation { continue }
            marks[i] = generation
            visited += 1
            switch program.ops[i] {
            case .byte, .match:
                if !program.isAlwaysOn[i] { found.append(pc) }
            case .assertEnd:
                if acrossEnd { stack.append(program.out1[i]) } else if !program.isAlwaysOn[i] { found.append(pc) }
            case .split:
                stack.append(program.out2[i])
                stack.append(program.out1[i])
            case .assertStart:
                if atStart { stack.append(program.out1[i]) }
            }
        }
    }

    /// A new walk: `adding` (already closed), then the closure of every byte instruction of
    /// `pcs` that accepts class `cls`, advanced past it.
    mutating func step(_ program: Program, from pcs: [Int32], on cls: Int, adding: [Int32]) {
        begin()
        for pc in adding where marks[Int(pc)] != generation {
            marks[Int(pc)] = generation
            found.append(pc)
        }
        for pc in pcs where program.ops[Int(pc)] == .byte && program.accepts(pc, cls) {
            walk(program, from: program.out1[Int(pc)], atStart: false, acrossEnd: false)
        }
    }

    /// Whether a new walk from `starts` reaches the match.
    mutating func reachesMatch(_ program: Program, from starts: [Int32], atStart: Bool, acrossEnd: Bool) -> Bool {
        begin()
        for pc in starts { walk(program, from: pc, atStart: atStart, acrossEnd: acrossEnd) }
        return found.contains(Program.matchPC)
    }
}

@available(*, unavailable, message: "a matcher's cache changes as it matches: keep one per thread or task")
extension UserAgentMatcher: Sendable {}

/// Compiles `PatternNode`s into one Thompson NFA, from the end backwards: each node is given
/// the instruction that follows it and returns its entry.
struct NFABuilder {
    private(set) var ops: [UInt8] = [4]  // 0: match
    private(set) var out1: [Int32] = [0]
    private(set) var out2: [Int32] = [0]
    private(set) var sets: [ByteSet] = []
    private var setIndex: [ByteSet: Int32] = [:]

    private static let byte: UInt8 = 0, split: UInt8 = 1, assertStart: UInt8 = 2, assertEnd: UInt8 = 3

    private mutating func emit(_ op: UInt8, _ a: Int32, _ b: Int32) -> Int32 {
        ops.append(op)
        out1.append(a)
        out2.append(b)
        return Int32(ops.count - 1)
    }

    mutating func compile(_ node: PatternNode, next: Int32) -> Int32 {
        switch node {
        case .bytes(let set):
            let index: Int32
            if let known = setIndex[set] {
                index = known
            } else {
                index = Int32(sets.count)
                sets.append(set)
                setIndex[set] = index
            }
            return emit(Self.byte, next, index)
        case .empty:
            return next
        case .sequence(let items):
            var entry = next
            for item in items.reversed() { entry = compile(item, next: entry) }
            return entry
        case .alternation(let items):
            var entry: Int32 = -1
            for item in items.reversed() {
                let branch = compile(item, next: next)
                entry = entry < 0 ? branch : emit(Self.split, branch, entry)
            }
            return entry
        case .inputStart:
            return emit(Self.assertStart, next, 0)
        case .inputEnd:
            return emit(Self.assertEnd, next, 0)
        case .repetition(let body, let min, let max):
            var tail = next
            if let max {
                // (x(x(x)?)?)? for the optional copies: each may stop and go on to `next`.
                for _ in 0..<(max - min) {
                    let copy = compile(body, next: tail)
                    tail = emit(Self.split, copy, next)
                }
            } else {
                let loop = emit(Self.split, 0, next)
                out1[Int(loop)] = compile(body, next: loop)
                tail = loop
            }
            for _ in 0..<min { tail = compile(body, next: tail) }
            return tail
        }
    }
}

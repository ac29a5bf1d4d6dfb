/// Why a user-agent pattern cannot be used: which pattern, what is wrong and where.
public struct PatternError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong with a pattern.
    public enum Problem: Sendable, Equatable, CustomStringConvertible {
        /// Patterns must be ASCII: a byte of 0x80 or more (or an escape for one).
        case nonASCII(UInt8)
        /// A `(` without its `)`.
        case unclosedGroup
        /// A `)` without its `(`.
        case unmatchedParenthesis
        /// A `[` without its `]`.
        case unclosedClass
        /// `[]` and `[^]`: JavaScript reads them as "nothing" and "anything", PCRE as the start
        /// of a class holding `]`; refused rather than guessed.
        case emptyClass
        /// A class range whose first character comes after its last (`[z-a]`), as written.
        case rangeOutOfOrder(String)
        /// A class range with `\d`, `\w` or `\s` at one end (`[\d-z]`).
        case classEscapeInRange
        /// `[[:alpha:]]`: a POSIX class to PCRE, literal characters to JavaScript.
        case posixClass
        /// A quantifier with nothing before it, or after an anchor (`*a`, `^*`).
        case nothingToRepeat
        /// Two quantifiers in a row (`a**`, `a{2}{3}`).
        case quantifierAfterQuantifier
        /// `*+`, `++`, `?+` or `{m,n}+`.
        case possessiveQuantifier
        /// `{m,n}` with `m` above `n`.
        case countsOutOfOrder(min: Int, max: Int)
        /// A repetition count above `limit` (1000).
        case countTooLarge(limit: Int)
        /// The pattern expands to more than `limit` NFA instructions (nested counts).
        case tooLarge(limit: Int)
        /// This pattern brings the list past `limit` NFA instructions in all.
        case allPatternsTooLarge(limit: Int)
        /// Groups nested deeper than `limit`.
        case nestedTooDeep(limit: Int)
        /// `\1` to `\9` or `\k<name>`.
        case backreference
        /// `(?=` or `(?!`.
        case lookahead
        /// `(?<=` or `(?<!`.
        case lookbehind
        /// `(?>`.
        case atomicGroup
        /// `(?m)`, `(?s)`, `(?i:…)` and the like, or `(?i)` anywhere but at the start.
        case inlineFlags
        /// `(?` followed by anything else (`(?#…)`, a malformed name).
        case unknownGroup
        /// `\b` or `\B` outside a class.
        case wordBoundary
        /// A known escape this matcher does not support (`\p`, `\c`, `\x` without two hex digits), as written.
        case unsupportedEscape(String)
        /// A backslash before a letter or digit that means nothing here (`\q`), as written.
        case unknownEscape(String)
        /// The pattern ends with a lone backslash.
        case trailingBackslash
        /// A pattern that matches the empty string at the start or at the end of every user
        /// agent (`""`, `a*`, `x|`, `$`) would label all traffic: refused as a mistake.
        case matchesEverything

        /// What is wrong, in words.
        public var description: String {
            switch self {
            case .nonASCII(let byte): "non-ASCII byte 0x\(String(byte, radix: 16, uppercase: true)) (patterns must be ASCII)"
            case .unclosedGroup: "unclosed group"
            case .unmatchedParenthesis: "unmatched ')'"
            case .unclosedClass: "unclosed character class"
            case .emptyClass: "empty character class '[]' or '[^]' (write '\\]' for a literal ']', '[\\s\\S]' for any character)"
            case .rangeOutOfOrder(let range): "range out of order '\(range)'"
            case .classEscapeInRange: "a range cannot start or end with a class escape such as \\d"
            case .posixClass: "POSIX classes such as [:alpha:] are not supported"
            case .nothingToRepeat: "nothing to repeat"
            case .quantifierAfterQuantifier: "a quantifier cannot follow another"
            case .possessiveQuantifier: "possessive quantifiers (*+, ++, ?+, {m,n}+) are not supported"
            case .countsOutOfOrder(let min, let max): "repetition {\(min),\(max)} has its numbers out of order"
            case .countTooLarge(let limit): "repetition count above \(limit)"
            case .tooLarge(let limit): "the pattern expands to more than \(limit) automaton states"
            case .allPatternsTooLarge(let limit): "the patterns together expand to more than \(limit) automaton states"
            case .nestedTooDeep(let limit): "groups nested deeper than \(limit) levels"
            case .backreference: "backreferences are not supported"
            case .lookahead: "lookahead (?= (?! is not supported"
            case .lookbehind: "lookbehind (?<= (?<! is not supported"
            case .atomicGroup: "atomic groups (?> are not supported"
            case .inlineFlags: "inline flags are not supported, except (?i) at the start (matching is always case-insensitive)"
            case .unknownGroup: "unknown group construct '(?'"
            case .wordBoundary: "word boundaries \\b and \\B are not supported"
            case .unsupportedEscape(let escape): "escape \(escape) is not supported"
            case .unknownEscape(let escape): "unknown escape \(escape)"
            case .trailingBackslash: "a backslash ends the pattern"
            case .matchesEverything: "it matches the empty string, so it would match every user agent"
            }
        }
    }

    /// The pattern's position in the list given to `UserAgentMatcher`.
    public var index: Int
    /// The pattern as written.
    public var pattern: String
    /// The byte offset in `pattern` where the problem is; `nil` when it is the whole pattern's.
    public var offset: Int?
    /// What is wrong.
    public var problem: Problem

    /// The pattern, quoted, and what is wrong where: `pattern "foo(": unclosed group at offset 3`.
    public var patternDescription: String {
        var quoted = ""
        JSONText.appendQuoted(pattern, to: &quoted)
        return "pattern \(quoted): \(problem)" + (offset.map { " at offset \($0)" } ?? "")
    }

    /// The same, with the pattern's index: `pattern 17 "foo(": unclosed group at offset 3`.
    public var description: String {
        "pattern \(index) " + patternDescription.dropFirst("pattern ".count)
    }
}

/// A set of bytes, as 256 bits.
struct ByteSet: Hashable {
    private var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0

    init() {}

    init(_ bytes: some Sequence<UInt8>) {
        for b in bytes { insert(b) }
    }

    func contains(_ b: UInt8) -> Bool {
        let bit = UInt64(1) << UInt64(b & 63)
        switch b >> 6 {
        case 0: return w0 & bit != 0
        case 1: return w1 & bit != 0
        case 2: return w2 & bit != 0
        default: return w3 & bit != 0
        }
    }

    mutating func insert(_ b: UInt8) {
        let bit = UInt64(1) << UInt64(b & 63)
        switch b >> 6 {
        case 0: w0 |= bit
        case 1: w1 |= bit
        case 2: w2 |= bit
        default: w3 |= bit
        }
    }

    mutating func formUnion(_ other: ByteSet) {
        w0 |= other.w0; w1 |= other.w1; w2 |= other.w2; w3 |= other.w3
    }

    var inverted: ByteSet {
        var s = ByteSet()
        s.w0 = ~w0; s.w1 = ~w1; s.w2 = ~w2; s.w3 = ~w3
        return s
    }

    /// The set with the other case of every ASCII letter in it.
    var caseFolded: ByteSet {
        var s = self
        for b in UInt8(ascii: "A")...UInt8(ascii: "Z") where contains(b) || contains(b | 0x20) {
            s.insert(b)
            s.insert(b | 0x20)
        }
        return s
    }

    static let digits = ByteSet(UInt8(ascii: "0")...UInt8(ascii: "9"))
    static let word = ByteSet(Array(UInt8(ascii: "0")...UInt8(ascii: "9")) + Array(UInt8(ascii: "A")...UInt8(ascii: "Z"))
        + Array(UInt8(ascii: "a")...UInt8(ascii: "z")) + [UInt8(ascii: "_")])
    /// ASCII white space as JavaScript's `\s` has it: space, tab, line feed, vertical tab, form
    /// feed, carriage return.
    static let space = ByteSet([0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D])
    /// `.`: every byte but line feed and carriage return.
    static let dot = ByteSet([0x0A, 0x0D]).inverted
}

/// A parsed pattern: what the NFA is built from.
indirect enum PatternNode {
    /// One byte of the set (already case-folded).
    case bytes(ByteSet)
    case empty
    case sequence([PatternNode])
    case alternation([PatternNode])
    /// `max == nil`: unbounded.
    case repetition(PatternNode, min: Int, max: Int?)
    /// `^`: only at the start of the user agent (no multi-line mode).
    case inputStart
    /// `$`: only at its end.
    case inputEnd

    /// How many NFA instructions the node compiles to (see `NFABuilder`), saturating.
    var instructionCount: Int {
        switch self {
        case .bytes, .inputStart, .inputEnd: return 1
        case .empty: return 0
        case .sequence(let items): return items.reduce(0) { Self.add($0, $1.instructionCount) }
        case .alternation(let items): return items.reduce(items.count - 1) { Self.add($0, $1.instructionCount) }
        case .repetition(let node, let min, let max):
            let size = node.instructionCount
            let mandatory = Self.multiply(min, size)
            guard let max else { return Self.add(mandatory, Self.add(size, 1)) }
            return Self.add(mandatory, Self.multiply(max - min, Self.add(size, 1)))
        }
    }

    private static func add(_ a: Int, _ b: Int) -> Int {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    private static func multiply(_ a: Int, _ b: Int) -> Int {
        let (product, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? .max : product
    }
}

/// Reads one pattern of the `crawler-user-agents` syntax (a JavaScript and PCRE subset: see
/// `UserAgentMatcher`) into a `PatternNode`, case-folded; refuses anything else, saying where.
struct PatternParser {
    /// The most a counted repetition may ask for.
    static let maxCount = 1000
    /// The most NFA instructions one pattern may expand to.
    static let maxInstructions = 10_000
    /// The deepest nesting of groups (the parser recurses on them).
    static let maxDepth = 64

    struct Failure: Error {
        var offset: Int?
        var problem: PatternError.Problem
    }

    private let text: [UInt8]
    private var offset = 0
    private var depth = 0

    private init(_ text: [UInt8]) {
        self.text = text
    }

    static func parse(_ pattern: String) throws(Failure) -> PatternNode {
        let bytes = Array(pattern.utf8)
        if let i = bytes.firstIndex(where: { $0 >= 0x80 }) { throw Failure(offset: i, problem: .nonASCII(bytes[i])) }
        var parser = PatternParser(bytes)
        // A leading (?i) says what matching does anyway.
        if bytes.starts(with: Array("(?i)".utf8)) { parser.offset = 4 }
        let node = try parser.alternation()
        if parser.offset < bytes.count {
            // alternation() stops only at ')' or the end.
            throw Failure(offset: parser.offset, problem: .unmatchedParenthesis)
        }
        guard node.instructionCount <= maxInstructions else { throw Failure(offset: nil, problem: .tooLarge(limit: maxInstructions)) }
        return node
    }

    // MARK: Structure

    private var atEnd: Bool { offset >= text.count }

    private func peek(_ ahead: Int = 0) -> UInt8? {
        offset + ahead < text.count ? text[offset + ahead] : nil
    }

    private mutating func alternation() throws(Failure) -> PatternNode {
        var branches = [try sequence()]
        while peek() == UInt8(ascii: "|") {
            offset += 1
            branches.append(try sequence())
        }
        return branches.count == 1 ? branches[0] : .alternation(branches)
    }

    private mutating func sequence() throws(Failure) -> PatternNode {
        var items: [PatternNode] = []
        while let b = peek(), b != UInt8(ascii: "|"), b != UInt8(ascii: ")") {
            let start = offset
            let atom = try atom()
            items.append(try quantified(atom, atomStart: start))
        }
        return items.isEmpty ? .empty : items.count == 1 ? items[0] : .sequence(items)
    }

    /// The atom's quantifier, if one follows; checks what may not follow it.
    private mutating func quantified(_ atom: PatternNode, atomStart: Int) throws(Failure) -> PatternNode {
        let quantifierStart = offset
        guard let (min, max) = try quantifier() else { return atom }
        switch atom {
        case .inputStart, .inputEnd: throw Failure(offset: quantifierStart, problem: .nothingToRepeat)
        default: break
        }
        if peek() == UInt8(ascii: "?") {
            offset += 1  // lazy: the same set of matches
        } else if peek() == UInt8(ascii: "+") {
            throw Failure(offset: offset, problem: .possessiveQuantifier)
        }
        let afterQuantifier = offset
        if try quantifier() != nil { throw Failure(offset: afterQuantifier, problem: .quantifierAfterQuantifier) }
        let node = PatternNode.repetition(atom, min: min, max: max)
        guard node.instructionCount <= Self.maxInstructions else {
            throw Failure(offset: quantifierStart, problem: .tooLarge(limit: Self.maxInstructions))
        }
        return node
    }

    /// `*`, `+`, `?` or a counted `{m}`, `{m,}`, `{m,n}` at the offset (consumed), else `nil`.
    private mutating func quantifier() throws(Failure) -> (Int, Int?)? {
        switch peek() {
        case UInt8(ascii: "*"): offset += 1; return (0, nil)
        case UInt8(ascii: "+"): offset += 1; return (1, nil)
        case UInt8(ascii: "?"): offset += 1; return (0, 1)
        case UInt8(ascii: "{"):
            let start = offset
            guard let (min, max, end) = countedQuantifier(at: offset) else { return nil }
            for count in [min, max ?? 0] where count > Self.maxCount {
                throw Failure(offset: start, problem: .countTooLarge(limit: Self.maxCount))
            }
            if let max, max < min { throw Failure(offset: start, problem: .countsOutOfOrder(min: min, max: max)) }
            offset = end
            return (min, max)
        default: return nil
        }
    }

    /// `{m}`, `{m,}` or `{m,n}` starting at `i`: the counts and the offset after `}`. Anything
    /// else (`{`, `{a}`, `{,5}`) is no quantifier, and `{` is then a literal, as in JavaScript
    /// and PCRE.
    private func countedQuantifier(at i: Int) -> (Int, Int?, Int)? {
        var j = i + 1
        func number() -> Int? {
            let start = j
            var value = 0
            while j < text.count, text[j] >= 0x30, text[j] <= 0x39 {
                value = Swift.min(value * 10 + Int(text[j] - 0x30), 1_000_000)
                j += 1
            }
            return j > start ? value : nil
        }
        guard let min = number() else { return nil }
        var max: Int? = min
        if j < text.count, text[j] == UInt8(ascii: ",") {
            j += 1
            max = number()
        }
        guard j < text.count, text[j] == UInt8(ascii: "}") else { return nil }
        return (min, max, j + 1)
    }

    private mutating func atom() throws(Failure) -> PatternNode {
        let start = offset
        let b = text[offset]
        switch b {
        case UInt8(ascii: "("): return try group()
        case UInt8(ascii: "["): return try characterClass()
        case UInt8(ascii: "."): offset += 1; return .bytes(.dot)
        case UInt8(ascii: "^"): offset += 1; return .inputStart
        case UInt8(ascii: "$"): offset += 1; return .inputEnd
        case UInt8(ascii: "\\"): return try escape()
        case UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "?"):
            throw Failure(offset: start, problem: .nothingToRepeat)
        case UInt8(ascii: "{") where countedQuantifier(at: offset) != nil:
            throw Failure(offset: start, problem: .nothingToRepeat)
        default:
            offset += 1
            return .bytes(ByteSet([b]).caseFolded)
        }
    }

    private mutating func group() throws(Failure) -> PatternNode {
        let start = offset
        offset += 1
        if peek() == UInt8(ascii: "?") {
            switch peek(1) {
            case UInt8(ascii: ":"): offset += 2
            case UInt8(ascii: "="), UInt8(ascii: "!"): throw Failure(offset: start, problem: .lookahead)
            case UInt8(ascii: ">"): throw Failure(offset: start, problem: .atomicGroup)
            case UInt8(ascii: "<") where peek(2) == UInt8(ascii: "=") || peek(2) == UInt8(ascii: "!"):
                throw Failure(offset: start, problem: .lookbehind)
            case UInt8(ascii: "<"):
                offset += 2
                try groupName(groupStart: start)
            case UInt8(ascii: "P") where peek(2) == UInt8(ascii: "<"):
                offset += 3
                try groupName(groupStart: start)
            case let c? where ByteSet.word.contains(c) || c == UInt8(ascii: "-"):
                throw Failure(offset: start, problem: .inlineFlags)
            default:
                throw Failure(offset: start, problem: .unknownGroup)
            }
        }
        depth += 1
        guard depth <= Self.maxDepth else { throw Failure(offset: start, problem: .nestedTooDeep(limit: Self.maxDepth)) }
        let inner = try alternation()
        depth -= 1
        guard peek() == UInt8(ascii: ")") else { throw Failure(offset: start, problem: .unclosedGroup) }
        offset += 1
        return inner
    }

    /// Skips a named group's `name>` ((?<name>…) or (?P<name>…): a group like any other here).
    private mutating func groupName(groupStart: Int) throws(Failure) {
        let nameStart = offset
        while let c = peek(), ByteSet.word.contains(c) { offset += 1 }
        guard offset > nameStart, peek() == UInt8(ascii: ">") else { throw Failure(offset: groupStart, problem: .unknownGroup) }
        offset += 1
    }

    // MARK: Escapes and classes

    /// What an escape stands for: one byte, or a class such as `\d`.
    private enum Escaped {
        case byte(UInt8)
        case set(ByteSet)
    }

    private mutating func escape() throws(Failure) -> PatternNode {
        switch try escapedItem(inClass: false) {
        case .byte(let b): .bytes(ByteSet([b]).caseFolded)
        case .set(let s): .bytes(s)
        }
    }

    /// The escape at the offset (a backslash), consumed.
    private mutating func escapedItem(inClass: Bool) throws(Failure) -> Escaped {
        let start = offset
        guard let c = peek(1) else { throw Failure(offset: start, problem: .trailingBackslash) }
        offset += 2
        let shown = "\\" + String(UnicodeScalar(c))
        switch c {
        case UInt8(ascii: "d"): return .set(.digits)
        case UInt8(ascii: "D"): return .set(ByteSet.digits.inverted)
        case UInt8(ascii: "w"): return .set(.word)
        case UInt8(ascii: "W"): return .set(ByteSet.word.inverted)
        case UInt8(ascii: "s"): return .set(.space)
        case UInt8(ascii: "S"): return .set(ByteSet.space.inverted)
        case UInt8(ascii: "t"): return .byte(0x09)
        case UInt8(ascii: "n"): return .byte(0x0A)
        case UInt8(ascii: "v"): return .byte(0x0B)
        case UInt8(ascii: "f"): return .byte(0x0C)
        case UInt8(ascii: "r"): return .byte(0x0D)
        case UInt8(ascii: "b") where inClass: return .byte(0x08)
        case UInt8(ascii: "b"), UInt8(ascii: "B"): throw Failure(offset: start, problem: .wordBoundary)
        case UInt8(ascii: "0") where !(peek().map { $0 >= 0x30 && $0 <= 0x39 } ?? false): return .byte(0)
        case UInt8(ascii: "0"): throw Failure(offset: start, problem: .unsupportedEscape("\\0 followed by a digit (octal)"))
        case UInt8(ascii: "1")...UInt8(ascii: "9"): throw Failure(offset: start, problem: .backreference)
        case UInt8(ascii: "k"): throw Failure(offset: start, problem: .backreference)
        case UInt8(ascii: "x"), UInt8(ascii: "u"):
            let digits = c == UInt8(ascii: "x") ? 2 : 4
            var value = 0
            for _ in 0..<digits {
                guard let h = peek(), let v = Int(String(UnicodeScalar(h)), radix: 16) else {
                    throw Failure(offset: start, problem: .unsupportedEscape(shown + " without \(digits) hex digits"))
                }
                value = value * 16 + v
                offset += 1
            }
            guard value < 0x80 else { throw Failure(offset: start, problem: .nonASCII(UInt8(truncatingIfNeeded: Swift.min(value, 0xFF)))) }
            return .byte(UInt8(value))
        case UInt8(ascii: "p"), UInt8(ascii: "P"), UInt8(ascii: "c"):
            throw Failure(offset: start, problem: .unsupportedEscape(shown))
        case _ where ByteSet.word.contains(c):
            throw Failure(offset: start, problem: .unknownEscape(shown))
        default:
            // Escaped punctuation (and any other non-word character) stands for itself.
            return .byte(c)
        }
    }

    private mutating func characterClass() throws(Failure) -> PatternNode {
        let start = offset
        offset += 1
        let negated = peek() == UInt8(ascii: "^")
        if negated { offset += 1 }
        if peek() == UInt8(ascii: "]") { throw Failure(offset: start, problem: .emptyClass) }
        var set = ByteSet()
        while true {
            guard let b = peek() else { throw Failure(offset: start, problem: .unclosedClass) }
            if b == UInt8(ascii: "]") { offset += 1; break }
            if b == UInt8(ascii: "["), peek(1) == UInt8(ascii: ":") { throw Failure(offset: offset, problem: .posixClass) }
            let itemStart = offset
            let first = try classItem()
            // A range `a-z`, unless the '-' is the last thing before ']'.
            if peek() == UInt8(ascii: "-"), let after = peek(1), after != UInt8(ascii: "]") {
                offset += 1
                let second = try classItem()
                guard case .byte(let low) = first, case .byte(let high) = second else {
                    throw Failure(offset: itemStart, problem: .classEscapeInRange)
                }
                guard low <= high else {
                    let shown = String(decoding: text[itemStart..<offset], as: UTF8.self)
                    throw Failure(offset: itemStart, problem: .rangeOutOfOrder(shown))
                }
                set.formUnion(ByteSet(low...high))
                continue
            }
            switch first {
            case .byte(let b): set.insert(b)
            case .set(let s): set.formUnion(s)
            }
        }
        // Folded before negation: [^a] refuses 'A' too, as /[^a]/i does.
        let folded = set.caseFolded
        return .bytes(negated ? folded.inverted : folded)
    }

    private mutating func classItem() throws(Failure) -> Escaped {
        guard let b = peek() else { throw Failure(offset: offset, problem: .unclosedClass) }
        if b == UInt8(ascii: "\\") { return try escapedItem(inClass: true) }
        offset += 1
        return .byte(b)
    }
}

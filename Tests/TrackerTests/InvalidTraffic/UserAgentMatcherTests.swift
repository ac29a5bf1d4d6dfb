import Foundation
import Testing
@testable import TrackerInput

private func matcher(_ patterns: String...) throws -> UserAgentMatcher {
    try UserAgentMatcher(patterns: patterns)
}

/// The refusal of a single pattern, as `PatternError.description` gives it.
private func refusal(_ pattern: String) -> String {
    do {
        _ = try UserAgentMatcher(patterns: [pattern])
        return "accepted"
    } catch {
        return error.description
    }
}

extension InvalidTraffic {
    @Suite struct UserAgentPatternSemantics {
        /// (pattern, user agent, matches)
        static let cases: [(String, String, Bool)] = [
            ("Googlebot\\/", "Mozilla/5.0 (compatible; Googlebot/2.1)", true),
            ("Googlebot\\/", "Mozilla/5.0 (compatible; googlebot/2.1)", true),  // case ignored
            ("Googlebot\\/", "Mozilla/5.0 (compatible; Googlebot 2.1)", false),
            ("bingbot", "BINGBOT", true),
            ("^curl", "curl/8.0", true),
            ("^curl", "xcurl/8.0", false),
            ("^curl", "Curl", true),
            ("libwww$", "perl libwww", true),
            ("libwww$", "libwww-perl", false),
            ("^$", "", true),
            ("^$", " ", false),
            ("AdsBot-Google([^-]|$)", "AdsBot-Google", true),
            ("AdsBot-Google([^-]|$)", "AdsBot-Google-Mobile", false),
            ("AdsBot-Google([^-]|$)", "AdsBot-Google (+http://www.google.com/adsbot.html)", true),
            ("(^| )sentry\\/", "sentry/1.0", true),
            ("(^| )sentry\\/", "x sentry/1.0", true),
            ("(^| )sentry\\/", "xsentry/1.0", false),
            ("[wW]get", "WGET/1.21", true),
            ("S[eE][mM]rushBot", "semrushbot", true),
            ("ContextualBot[\\s\\S]*outcomes\\.net", "ContextualBot/1 (outcomes.net)", true),
            ("ContextualBot[\\s\\S]*outcomes\\.net", "ContextualBot/1 (outcomesXnet)", false),
            ("Automaton|Newsify Feed Fetcher", "newsify feed fetcher", true),
            ("a.c", "abc", true),
            ("a.c", "a\nc", false),
            ("a.c", "a\rc", false),
            ("a\\.c", "abc", false),
            ("\\d{3}", "ab12c", false),
            ("\\d{3}", "ab123", true),
            ("x\\d{2,}y", "x1y", false),
            ("x\\d{2,}y", "x12345y", true),
            ("x\\d{2,3}y", "x1234y", false),
            ("x\\d{2,3}y", "x123y", true),
            ("x\\d{0}y", "xy", true),
            ("\\w+bot", "my_bot", true),
            ("\\Wbot", "_bot", false),
            ("\\Wbot", "-bot", true),
            ("\\sbot", "a\tbot", true),
            ("\\Sbot", " bot", false),
            ("\\Dbot", "9bot", false),
            ("[^a]bc", "Abc", false),  // [^a] refuses A too, as /[^a]/i does
            ("[^a]bc", "xbc", true),
            ("[a-c]x", "Bx", true),
            ("[a-c]x", "dx", false),
            ("[-a]x", "-x", true),
            ("[a-]x", "-x", true),
            ("[\\]]x", "]x", true),
            ("[.]x", "ax", false),
            ("a]", "a]", true),
            ("a}", "a}", true),
            ("a{", "a{", true),  // no quantifier: a literal brace
            ("a{x}", "a{x}", true),
            ("a{,3}", "a{,3}", true),
            ("colou?r", "color", true),
            ("colou?r", "colour", true),
            ("colou??r", "colour", true),  // lazy reads as greedy
            ("ab*?c", "abbbc", true),
            ("(?:ab)+c", "ababc", true),
            ("(?<name>ab)c", "abc", true),
            ("(?i)BOT", "bot", true),
            ("a|b|c", "zzc", true),
            ("(a|b)(c|d)", "bd", true),
            ("(a|b)(c|d)", "ba", false),
            ("\\x41B", "ab", true),
            ("\\u0041B", "ab", true),
            ("\\/\\.\\(\\)\\-\\\\\\!\\+", "/.()-\\!+", true),
            ("a\\tb", "a\tb", true),
            ("é", "", false),  // refused, see below; here only to keep the table honest
        ].filter { $0.0 != "é" }

        @Test(arguments: cases)
        func patternMatchesAsJavaScriptWould(_ pattern: String, _ userAgent: String, _ expected: Bool) throws {
            let m = try matcher(pattern)
            #expect(m.matches(Array(userAgent.utf8)) == expected, "\(pattern) on \(userAgent)")
            #expect(m.matches(userAgent) == expected)
        }

        @Test func anyPatternOfTheListMatches() throws {
            let m = try matcher("^curl", "bingbot", "Googlebot\\/")
            #expect(m.matches("Mozilla/5.0 (compatible; bingbot/2.0)"))
            #expect(m.matches("curl/8.5.0"))
            #expect(m.matches("Googlebot/2.1"))
            #expect(!m.matches("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Safari/604.1"))
            #expect(!m.matches("x curl"))
        }

        @Test func noPatternMatchesNothing() throws {
            let m = try UserAgentMatcher(patterns: [])
            #expect(!m.matches(""))
            #expect(!m.matches("Googlebot"))
        }

        @Test func nonASCIIBytesAreMatchedOnlyByDotNegatedClassesAndNegatedEscapes() throws {
            let ua = Array("bot\u{E9}x".utf8)  // é is two bytes
            #expect(try matcher("bot..x").matches(ua))
            #expect(try !matcher("bot.x").matches(ua))
            #expect(try matcher("bot[^a]+x").matches(ua))
            #expect(try matcher("bot\\W\\Wx").matches(ua))
            #expect(try matcher("bot\\D\\Dx").matches(ua))
            #expect(try matcher("bot\\S\\Sx").matches(ua))
            #expect(try !matcher("bot\\w").matches(ua))
            #expect(try !matcher("bot[\\x00-\\x7f]").matches(ua))
            // Invalid UTF-8 is bytes like any other.
            #expect(try matcher("a.b").matches([0x61, 0xFF, 0x62]))
        }

        @Test func bytesStoredInADatabaseRowAreMatchedWhereTheyAre() throws {
            let m = try matcher("bot")
            let row = Array("a bot".utf8)
            #expect(row.withUnsafeBytes { m.matches($0) })
            #expect(!Array("a bo".utf8).withUnsafeBytes { m.matches($0) })
        }
    }

    @Suite struct UserAgentPatternRefusals {
        @Test func eachRefusalNamesThePatternWhatIsWrongAndWhere() {
            let cases: [(String, String)] = [
                ("foo(", #"pattern 0 "foo(": unclosed group at offset 3"#),
                ("foo)", #"pattern 0 "foo)": unmatched ')' at offset 3"#),
                ("[abc", #"pattern 0 "[abc": unclosed character class at offset 0"#),
                ("a[]", #"pattern 0 "a[]": empty character class '[]' or '[^]' (write '\]' for a literal ']', '[\s\S]' for any character) at offset 1"#),
                ("[^]", #"pattern 0 "[^]": empty character class '[]' or '[^]' (write '\]' for a literal ']', '[\s\S]' for any character) at offset 0"#),
                ("x[z-a]", #"pattern 0 "x[z-a]": range out of order 'z-a' at offset 2"#),
                ("[\\d-z]", #"pattern 0 "[\\d-z]": a range cannot start or end with a class escape such as \d at offset 1"#),
                ("[[:alpha:]]", #"pattern 0 "[[:alpha:]]": POSIX classes such as [:alpha:] are not supported at offset 1"#),
                ("*a", #"pattern 0 "*a": nothing to repeat at offset 0"#),
                ("a|+", #"pattern 0 "a|+": nothing to repeat at offset 2"#),
                ("({2})", #"pattern 0 "({2})": nothing to repeat at offset 1"#),
                ("x^*", #"pattern 0 "x^*": nothing to repeat at offset 2"#),
                ("a**", #"pattern 0 "a**": a quantifier cannot follow another at offset 2"#),
                ("a{2}{3}", #"pattern 0 "a{2}{3}": a quantifier cannot follow another at offset 4"#),
                ("a++", #"pattern 0 "a++": possessive quantifiers (*+, ++, ?+, {m,n}+) are not supported at offset 2"#),
                ("a{3,2}", #"pattern 0 "a{3,2}": repetition {3,2} has its numbers out of order at offset 1"#),
                ("a{1001}", #"pattern 0 "a{1001}": repetition count above 1000 at offset 1"#),
                ("a{2,99999999999}", #"pattern 0 "a{2,99999999999}": repetition count above 1000 at offset 1"#),
                ("(a{1000}){1000}", #"pattern 0 "(a{1000}){1000}": the pattern expands to more than 10000 automaton states at offset 9"#),
                ("(a)\\1", #"pattern 0 "(a)\\1": backreferences are not supported at offset 3"#),
                ("(?<n>a)\\k<n>", #"pattern 0 "(?<n>a)\\k<n>": backreferences are not supported at offset 7"#),
                ("bot(?=x)", #"pattern 0 "bot(?=x)": lookahead (?= (?! is not supported at offset 3"#),
                ("bot(?!x)", #"pattern 0 "bot(?!x)": lookahead (?= (?! is not supported at offset 3"#),
                ("(?<=x)bot", #"pattern 0 "(?<=x)bot": lookbehind (?<= (?<! is not supported at offset 0"#),
                ("(?<!x)bot", #"pattern 0 "(?<!x)bot": lookbehind (?<= (?<! is not supported at offset 0"#),
                ("(?>a)", #"pattern 0 "(?>a)": atomic groups (?> are not supported at offset 0"#),
                ("a(?i)b", #"pattern 0 "a(?i)b": inline flags are not supported, except (?i) at the start (matching is always case-insensitive) at offset 1"#),
                ("(?m)^a", #"pattern 0 "(?m)^a": inline flags are not supported, except (?i) at the start (matching is always case-insensitive) at offset 0"#),
                ("(?#c)a", #"pattern 0 "(?#c)a": unknown group construct '(?' at offset 0"#),
                ("\\bbot", #"pattern 0 "\\bbot": word boundaries \b and \B are not supported at offset 0"#),
                ("\\p{L}", #"pattern 0 "\\p{L}": escape \p is not supported at offset 0"#),
                ("\\q", #"pattern 0 "\\q": unknown escape \q at offset 0"#),
                ("a\\", #"pattern 0 "a\\": a backslash ends the pattern at offset 1"#),
                ("\\xZZ", #"pattern 0 "\\xZZ": escape \x without 2 hex digits is not supported at offset 0"#),
                ("caf\u{E9}", #"pattern 0 "caf\#u{E9}": non-ASCII byte 0xC3 (patterns must be ASCII) at offset 3"#),
                ("\\xe9", #"pattern 0 "\\xe9": non-ASCII byte 0xE9 (patterns must be ASCII) at offset 0"#),
                ("", #"pattern 0 "": it matches the empty string, so it would match every user agent"#),
                ("bot|", #"pattern 0 "bot|": it matches the empty string, so it would match every user agent"#),
                ("x*", #"pattern 0 "x*": it matches the empty string, so it would match every user agent"#),
                ("$", #"pattern 0 "$": it matches the empty string, so it would match every user agent"#),
                ("^(a)?", #"pattern 0 "^(a)?": it matches the empty string, so it would match every user agent"#),
                ("(?i)", #"pattern 0 "(?i)": it matches the empty string, so it would match every user agent"#),
            ]
            for (pattern, expected) in cases {
                #expect(refusal(pattern) == expected)
            }
        }

        @Test func theRefusedPatternIsNamedByItsIndexInTheList() throws {
            do {
                _ = try UserAgentMatcher(patterns: ["Googlebot", "bingbot", "bad(", "curl"])
                Issue.record("expected a refusal")
            } catch {
                #expect(error.index == 2)
                #expect(error.pattern == "bad(")
                #expect(error.offset == 3)
                #expect(error.problem == .unclosedGroup)
                #expect(error.patternDescription == #"pattern "bad(": unclosed group at offset 3"#)
            }
        }

        @Test func deepNestingIsRefusedBeforeItExhaustsTheStack() {
            let deep = String(repeating: "(", count: 100_000) + "a" + String(repeating: ")", count: 100_000)
            #expect(refusal(deep).hasSuffix("groups nested deeper than 64 levels at offset 64"))
            let fine = String(repeating: "(", count: 64) + "a" + String(repeating: ")", count: 64)
            #expect(refusal(fine) == "accepted")
        }

        @Test func patternsThatMatchOnlyTheEmptyUserAgentOrOnlyAtAnEdgeAreAccepted() throws {
            #expect(refusal("^$") == "accepted")
            #expect(refusal("^a*$") == "accepted")  // only the empty user agent or one of a's
            #expect(refusal("^a") == "accepted")
            #expect(refusal("a$") == "accepted")
        }
    }

    /// Patterns and inputs checked against Foundation's NSRegularExpression (ICU), which agrees
    /// with JavaScript on this syntax for ASCII input without line breaks.
    @Suite struct UserAgentMatcherAgainstAReference {
        private static func reference(_ pattern: String) throws -> NSRegularExpression {
            try NSRegularExpression(pattern: pattern, options: [.caseInsensitive])
        }

        private static func referenceMatches(_ regex: NSRegularExpression, _ text: String) -> Bool {
            regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }

        /// A random pattern of the supported syntax over a small alphabet, so that matches happen.
        private static func randomPattern(_ rng: inout SplitMix64, depth: Int = 0) -> String {
            func pick<T>(_ items: [T]) -> T { items[Int(rng.next() % UInt64(items.count))] }
            var out = ""
            let atoms = Int(1 + rng.next() % 4)
            for _ in 0..<atoms {
                var atom: String
                switch rng.next() % 10 {
                case 0 where depth < 3:
                    atom = "(" + (0..<Int(1 + rng.next() % 3)).map { _ in randomPattern(&rng, depth: depth + 1) }.joined(separator: "|") + ")"
                case 1: atom = pick(["[ab]", "[^a]", "[a-c]", "[^-b]", "[A-B]", "[\\d]", "[\\s\\S]"])
                case 2: atom = pick([".", "\\d", "\\w", "\\W", "\\s", "\\S", "\\-", "\\/"])
                case 3 where depth == 0 && out.isEmpty: atom = "^"
                default: atom = pick(["a", "b", "c", "A", "B", "-", "/", " ", "1"])
                }
                if atom != "^", rng.next() % 3 == 0 {
                    atom += pick(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}", "*?", "+?"])
                }
                out += atom
            }
            if depth == 0, rng.next() % 5 == 0 { out += "$" }
            return out
        }

        @Test func randomPatternsOnRandomUserAgentsAgreeWithICU() throws {
            var rng = SplitMix64(seed: 8)
            var compared = 0, matched = 0
            for _ in 0..<400 {
                let pattern = Self.randomPattern(&rng)
                guard let m = try? UserAgentMatcher(patterns: [pattern]) else {
                    // Refused patterns are the ones matching the empty string; ICU agrees they do.
                    #expect(Self.referenceMatches(try Self.reference(pattern), ""), "\(pattern) refused")
                    continue
                }
                let regex = try Self.reference(pattern)
                for _ in 0..<40 {
                    let length = Int(rng.next() % 12)
                    let text = String((0..<length).map { _ in Array("abcAB-/ 1x")[Int(rng.next() % 10)] })
                    let expected = Self.referenceMatches(regex, text)
                    #expect(m.matches(text) == expected, "\(pattern) on \"\(text)\"")
                    compared += 1
                    if expected { matched += 1 }
                }
            }
            #expect(compared > 10_000)
            #expect(matched > compared / 10 && matched < compared * 9 / 10, "\(matched) of \(compared) matched")
        }

        @Test func oneMatcherOfManyPatternsAgreesWithEachPatternAlone() throws {
            var rng = SplitMix64(seed: 9)
            var patterns: [String] = []
            while patterns.count < 60 {
                let p = Self.randomPattern(&rng) + "x"  // never empty-matching
                if (try? UserAgentMatcher(patterns: [p])) != nil { patterns.append(p) }
            }
            let all = try UserAgentMatcher(patterns: patterns)
            let regexes = try patterns.map(Self.reference)
            for _ in 0..<2_000 {
                let text = String((0..<Int(rng.next() % 20)).map { _ in Array("abcAB-/ 1x")[Int(rng.next() % 10)] })
                #expect(all.matches(text) == regexes.contains { Self.referenceMatches($0, text) }, "\"\(text)\"")
            }
        }
    }

    @Suite struct UserAgentMatcherBoundedWork {
        /// The work bound documented on `UserAgentMatcher`: at most three walks over the NFA per
        /// byte, and two per call for its initial state.
        private func expectBoundedWork(_ m: UserAgentMatcher, bytes: Int, matches: Int, sourceLocation: SourceLocation = #_sourceLocation) {
            let s = m.statistics
            #expect(s.bytesScanned <= bytes, sourceLocation: sourceLocation)
            #expect(s.statesBuilt <= s.bytesScanned + matches, sourceLocation: sourceLocation)
            #expect(s.instructionsVisited <= (3 * s.bytesScanned + 2 * matches) * m.instructionCount, sourceLocation: sourceLocation)
            #expect(m.cachedStates <= UserAgentMatcher.maxCachedStates, sourceLocation: sourceLocation)
        }

        @Test func inputsCraftedForBacktrackingEnginesCostLinearWork() throws {
            let hostile = Array(String(repeating: "a", count: 511).utf8) + [UInt8(ascii: "!")]
            for pattern in ["(a+)+$", "(a|aa)*b", "(a*)*b", "(.*a){20}!x", "^(a?){25}a{25}$", "(a|a?)+c", "(\\w+\\s?)+$"] {
                let m = try UserAgentMatcher(patterns: [pattern])
                #expect(!m.matches(hostile), "\(pattern)")
                // Once more: all transitions are cached now.
                let built = m.statistics.statesBuilt
                #expect(!m.matches(hostile))
                #expect(m.statistics.statesBuilt == built, "\(pattern): a second scan builds no state")
                expectBoundedWork(m, bytes: 2 * hostile.count, matches: 2)
            }
        }

        @Test func aFullCacheIsEmptiedAndMatchingStaysRight() throws {
            // A cap of 4 states forces a flush every few bytes.
            let m = try UserAgentMatcher(patterns: ["a[^a]{6}b", "bot\\d{3}x", "(c|d)*e{3}"], maxCachedStates: 4, maxCacheBytes: 1 << 20)
            let reference = try UserAgentMatcher(patterns: ["a[^a]{6}b", "bot\\d{3}x", "(c|d)*e{3}"])
            var rng = SplitMix64(seed: 3)
            for _ in 0..<2_000 {
                let ua = (0..<Int(rng.next() % 40)).map { _ in Array("abotdce123x".utf8)[Int(rng.next() % 11)] }
                #expect(m.matches(ua) == reference.matches(ua))
                #expect(m.cachedStates <= 4)
            }
            #expect(m.statistics.cacheFlushes > 100)
            let tiny = try UserAgentMatcher(patterns: ["abc"], maxCachedStates: 100, maxCacheBytes: 1)
            #expect(tiny.matches("xxabcxx"))
            #expect(!tiny.matches("xxabxcx"))
            #expect(tiny.cachedStates <= 1)
        }

        @Test func scanningStopsAtTheFirstCertainMatch() throws {
            let m = try matcher("bot")
            let ua = Array(("bot" + String(repeating: "x", count: 500)).utf8)
            #expect(m.matches(ua))
            #expect(m.statistics.bytesScanned == 3)
            let anchored = try matcher("^curl")
            #expect(!anchored.matches(Array(("wget" + String(repeating: "x", count: 500)).utf8)))
            #expect(anchored.statistics.bytesScanned == 1, "after the first byte no pattern can match")
        }
    }
}

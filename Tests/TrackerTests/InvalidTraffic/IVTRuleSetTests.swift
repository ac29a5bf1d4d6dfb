import Testing
@testable import TrackerInput

/// A file that `readFile` cannot read.
private struct NoSuchFile: Error, CustomStringConvertible {
    var name: String
    var description: String { "no such file \(name)" }
}

/// Reads an activation document, serving `files` by name.
private func parse(_ document: String, files: [String: String] = [:]) throws(RuleSetError) -> IVTRuleSet {
    try IVTRuleSet.parse(Array(document.utf8)) { name in
        guard let text = files[name] else { throw NoSuchFile(name: name) }
        return Array(text.utf8)
    }
}

/// The refusal's text; the test fails when the document is accepted.
private func refusal(_ document: String, files: [String: String] = [:]) -> String {
    do {
        _ = try parse(document, files: files)
        Issue.record("expected \(document) to be refused")
        return ""
    } catch {
        return error.description
    }
}

private let crawlerFile = #"""
[
  {"pattern": "Googlebot\\/", "url": "http://www.google.com/bot.html", "instances": ["Googlebot/2.1"]},
  {"pattern": "bingbot", "addition_date": "2009/01/01"}
]
"""#

private let rangesFile = """
# data centers
34.64.0.0/10
   2600:1900::/28   # a comment after a range

\t192.0.2.7\r
"""

extension InvalidTraffic {
    @Suite struct IVTRuleSetActivationDocument {
        @Test func everyFieldIsRead() throws {
            let rules = try parse("""
                {
                  "name": "crawler-user-agents 1.67.0",
                  "userAgents": [{"pattern": "Googlebot", "name": "googlebot"}, {"pattern": "^curl"}],
                  "userAgentLists": ["crawler-user-agents.json"],
                  "ipRanges": ["10.1.2.3/8", "2001:db8::/32"],
                  "ipRangeFiles": ["ranges.txt"],
                  "maxClicksPerAd": 5,
                  "maxEventsPerClientMinute": 120
                }
                """, files: ["crawler-user-agents.json": crawlerFile, "ranges.txt": rangesFile])
            #expect(rules.name == "crawler-user-agents 1.67.0")
            #expect(rules.userAgents == [
                UserAgentRule(pattern: "Googlebot", name: "googlebot"), UserAgentRule(pattern: "^curl"),
                UserAgentRule(pattern: "Googlebot\\/"), UserAgentRule(pattern: "bingbot"),
            ])
            #expect(rules.ipRanges.map(\.description) == ["10.0.0.0/8", "2001:db8::/32", "34.64.0.0/10", "2600:1900::/28", "192.0.2.7/32"])
            #expect(rules.maxClicksPerAd == 5)
            #expect(rules.maxEventsPerClientMinute == 120)
            #expect(rules.sources == ["crawler-user-agents.json", "ranges.txt"])
            let (matcher, ranges) = try rules.compiled()
            #expect(matcher.matches("Mozilla/5.0 (compatible; bingbot/2.0)"))
            #expect(!matcher.matches("Mozilla/5.0 (iPhone)"))
            #expect(ranges.contains(IPAddress("34.127.0.1")!))
            #expect(!ranges.contains(IPAddress("192.0.2.8")!))
        }

        @Test func anEmptyDocumentIsTheEmptyRuleSet() throws {
            #expect(try parse("{}") == .empty)
            #expect(try parse(#"{"name": null, "userAgents": null, "maxClicksPerAd": null}"#) == .empty)
            #expect(IVTRuleSet.empty.isEmpty)
            let (matcher, ranges) = try IVTRuleSet.empty.compiled()
            #expect(!matcher.matches("Googlebot"))
            #expect(!matcher.matches(""))
            #expect(ranges.isEmpty)
        }

        @Test func filesAreReadByTheNameAsWrittenOnceEach() throws {
            var asked: [String] = []
            _ = try IVTRuleSet.parse(Array(#"{"userAgentLists": ["lists/a.json"], "ipRangeFiles": ["../r.txt"]}"#.utf8)) { name in
                asked.append(name)
                return Array((name.hasSuffix(".json") ? "[]" : "").utf8)
            }
            #expect(asked == ["lists/a.json", "../r.txt"])
        }

        @Test func eachMistakeIsNamedExactly() {
            let files = ["bots.json": crawlerFile, "ranges.txt": rangesFile]
            let cases: [(String, [String: String], String)] = [
                (#"{"maxClickPerAd": 5}"#, [:],
                 #"unknown field "maxClickPerAd"; the fields are name, sources, userAgents, userAgentLists, appExemptions, ipRanges, ipRangeFiles, maxClicksPerAd, maxEventsPerClientMinute"#),
                (#"{"maxClicksPerAd": 5, "maxClicksPerAd": 6}"#, [:], #"field "maxClicksPerAd" given twice"#),
                (#"{"maxClicksPerAd": 0}"#, [:], "maxClicksPerAd must be a positive integer up to 2147483647, got 0"),
                (#"{"maxClicksPerAd": -3}"#, [:], "maxClicksPerAd must be a positive integer up to 2147483647, got -3"),
                (#"{"maxClicksPerAd": 2.5}"#, [:], "maxClicksPerAd must be a positive integer up to 2147483647, got 2.5"),
                (#"{"maxClicksPerAd": 1e3}"#, [:], "maxClicksPerAd must be a positive integer up to 2147483647, got 1e3"),
                (#"{"maxEventsPerClientMinute": 2147483648}"#, [:],
                 "maxEventsPerClientMinute must be a positive integer up to 2147483647, got 2147483648"),
                (#"{"maxEventsPerClientMinute": "120"}"#, [:], #"maxEventsPerClientMinute must be a positive integer up to 2147483647, got "120""#),
                (#"{"maxEventsPerClientMinute": true}"#, [:], "maxEventsPerClientMinute must be a positive integer up to 2147483647, got a boolean"),
                (#"{"name": 7}"#, [:], "name must be a string, got a number"),
                (#"{"userAgents": {"pattern": "x"}}"#, [:], "userAgents must be an array, got an object"),
                (#"{"userAgents": ["Googlebot"]}"#, [:], "userAgents[0] must be a JSON object, got a string"),
                (#"{"userAgents": [{"name": "x"}]}"#, [:], #"userAgents[0] has no "pattern""#),
                (#"{"userAgents": [{"pattern": 5}]}"#, [:], "userAgents[0].pattern must be a string, got a number"),
                (#"{"userAgents": [{"pattern": "a", "name": false}]}"#, [:], "userAgents[0].name must be a string, got a boolean"),
                (#"{"userAgents": [{"pattern": "a", "nmae": "x"}]}"#, [:], #"unknown field "nmae" in userAgents[0]; the fields are pattern, name"#),
                (#"{"userAgents": [{"pattern": "ok"}, {"pattern": "foo("}]}"#, [:], #"userAgents[1]: pattern "foo(": unclosed group at offset 3"#),
                (#"{"userAgentLists": ["bots.json", "broken.json"]}"#, ["bots.json": crawlerFile, "broken.json": #"[{"pattern": "ok"}, {"pattern": "x"}, {"pattern": "foo("}]"#],
                 #"userAgentLists[1] (broken.json) entry 2: pattern "foo(": unclosed group at offset 3"#),
                (#"{"userAgentLists": ["missing.json"]}"#, files, "userAgentLists[0] (missing.json) cannot be read: no such file missing.json"),
                (#"{"userAgentLists": ["ranges.txt"]}"#, files, "userAgentLists[0] (ranges.txt) is not JSON: unexpected '#' at byte 0"),
                (#"{"userAgentLists": ["o.json"]}"#, ["o.json": "{}"], #"userAgentLists[0] (o.json) must be a JSON array of objects with a "pattern", got an object"#),
                (#"{"userAgentLists": ["o.json"]}"#, ["o.json": #"["x"]"#], #"userAgentLists[0] (o.json) entry 0 must be an object with a "pattern", got a string"#),
                (#"{"userAgentLists": ["o.json"]}"#, ["o.json": #"[{"url": "x"}]"#], #"userAgentLists[0] (o.json) entry 0 has no "pattern""#),
                (#"{"userAgentLists": ["o.json"]}"#, ["o.json": #"[{"pattern": null}]"#], #"userAgentLists[0] (o.json) entry 0: pattern must be a string, got null"#),
                (#"{"userAgentLists": [3]}"#, [:], "userAgentLists[0] must be a string, got a number"),
                (#"{"ipRanges": ["10.0.0.0/8", "::/0", "10.0.0.0/33"]}"#, [:], #"ipRanges[2]: "10.0.0.0/33" is not a CIDR range (prefix 0...32 for IPv4)"#),
                (#"{"ipRanges": ["example.com"]}"#, [:],
                 #"ipRanges[0]: "example.com" is not a CIDR range (an IPv4 or IPv6 address, optionally followed by /prefix)"#),
                (#"{"ipRanges": [" 10.0.0.0/8"]}"#, [:],
                 #"ipRanges[0]: " 10.0.0.0/8" is not a CIDR range (an IPv4 or IPv6 address, optionally followed by /prefix)"#),
                (#"{"ipRangeFiles": ["ranges.txt", "bad.txt"]}"#, ["ranges.txt": rangesFile, "bad.txt": "# ok\n10.0.0.0/8\n\n2001:db8::/129 # too long\n"],
                 #"ipRangeFiles[1] (bad.txt) line 4: "2001:db8::/129" is not a CIDR range (prefix 0...128 for IPv6)"#),
                (#"[]"#, [:], "the document must be a JSON object, got an array"),
                ("{", [:], "the document is not JSON: unexpected end of the body at byte 1"),
                (#"{"sources": "a"}"#, [:], "sources must be an array, got a string"),
            ]
            for (document, files, expected) in cases {
                #expect(refusal(document, files: files) == expected)
            }
        }

        @Test func aFileOfRangesMayHaveWindowsLineEnds() throws {
            let rules = try parse(#"{"ipRangeFiles": ["crlf.txt"]}"#, files: ["crlf.txt": "# list\r\n10.0.0.0/8\r\n192.0.2.7 # one\r\n\r\n2001:db8::/32\r\n"])
            #expect(rules.ipRanges.map(\.description) == ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"])
            #expect(refusal(#"{"ipRangeFiles": ["crlf.txt"]}"#, files: ["crlf.txt": "10.0.0.0/8\r\n10.0.0.0/99\r\n"])
                == #"ipRangeFiles[0] (crlf.txt) line 2: "10.0.0.0/99" is not a CIDR range (prefix 0...32 for IPv4)"#)
        }

        @Test func aFileOfRangesMustBeText() throws {
            let document = Array(#"{"ipRangeFiles": ["bin.txt"]}"#.utf8)
            #expect(throws: RuleSetError.notText(location: "ipRangeFiles[0] (bin.txt)")) {
                try IVTRuleSet.parse(document) { _ in [0x31, 0x30, 0xFF, 0x2E] }
            }
        }

        @Test func theWholeCrawlerListIsOneRuleSet() throws {
            let rules = try parse(#"{"name": "crawler-user-agents 1.67.0", "userAgentLists": ["crawler-user-agents.json"]}"#,
                                  files: ["crawler-user-agents.json": crawlerUserAgentsJSON])
            #expect(rules.userAgents.count == 1_504)
            #expect(try IVTRuleSet.parseStored(Array(rules.storedDocument.utf8)) == rules)
        }
    }

    @Suite struct IVTRuleSetStoredDocument {
        private func sample() throws -> IVTRuleSet {
            try parse("""
                {"name": "weekly \\"list\\"", "userAgents": [{"pattern": "Googlebot\\\\/", "name": "google"}, {"pattern": "a\\tb"}],
                 "userAgentLists": ["bots.json"], "ipRanges": ["10.1.2.3/8", "::ffff:192.0.2.0/120"], "maxEventsPerClientMinute": 120}
                """, files: ["bots.json": crawlerFile])
        }

        @Test func theStoredDocumentIsCanonicalJSONWithEverythingInlined() throws {
            #expect(try sample().storedDocument == #"""
                {
                  "name": "weekly \"list\"",
                  "sources": [
                    "bots.json"
                  ],
                  "userAgents": [
                    {"pattern": "Googlebot\\/", "name": "google"},
                    {"pattern": "a\tb"},
                    {"pattern": "Googlebot\\/"},
                    {"pattern": "bingbot"}
                  ],
                  "ipRanges": [
                    "10.0.0.0/8",
                    "192.0.2.0/24"
                  ],
                  "maxEventsPerClientMinute": 120
                }

                """#)
            #expect(IVTRuleSet.empty.storedDocument == "{\n  \"sources\": [],\n  \"userAgents\": [],\n  \"ipRanges\": []\n}\n")
        }

        @Test func theStoredDocumentReadsBackEqualAndIsDeterministic() throws {
            let rules = try sample()
            let stored = rules.storedDocument
            let back = try IVTRuleSet.parseStored(Array(stored.utf8))
            #expect(back == rules)
            #expect(back.storedDocument == stored)
            #expect(try sample().storedDocument == stored)
            #expect(try IVTRuleSet.parseStored(Array(IVTRuleSet.empty.storedDocument.utf8)) == .empty)
            let limits = IVTRuleSet(maxClicksPerAd: 1, maxEventsPerClientMinute: Int(Int32.max))
            #expect(try IVTRuleSet.parseStored(Array(limits.storedDocument.utf8)) == limits)
        }

        @Test func aStoredDocumentCanBeActivatedAgainKeepingItsSources() throws {
            let rules = try sample()
            let again = try parse(rules.storedDocument)
            #expect(again == rules)
        }

        @Test func aStoredDocumentNamesNoFile() {
            for field in ["userAgentLists", "ipRangeFiles"] {
                do {
                    _ = try IVTRuleSet.parseStored(Array(#"{"\#(field)": []}"#.utf8))
                    Issue.record("\(field) accepted in a stored document")
                } catch {
                    #expect(error.description.hasPrefix(#"unknown field "\#(field)""#))
                }
            }
        }

        @Test func aStoredDocumentWithABadPatternIsRefused() {
            #expect(throws: RuleSetError.self) {
                try IVTRuleSet.parseStored(Array(#"{"userAgents": [{"pattern": "(?=x)"}]}"#.utf8))
            }
            let built = IVTRuleSet(userAgents: [UserAgentRule(pattern: "ok"), UserAgentRule(pattern: "a**")])
            do {
                _ = try built.compiled()
                Issue.record("a** compiled")
            } catch {
                #expect(error.description == #"userAgents[1]: pattern "a**": a quantifier cannot follow another at offset 2"#)
            }
        }
    }
}

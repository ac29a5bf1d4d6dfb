import Testing
@testable import Tracker
@testable import TrackerInput

/// A rule set from its activation document, with no files.
private func rules(_ document: String) throws(RuleSetError) -> IVTRuleSet {
    try IVTRuleSet.parse(Array(document.utf8)) { name in throw RuleSetError.notText(location: name) }
}

/// The refusal's text; the test fails when the document is accepted.
private func refusal(_ document: String) -> String {
    do {
        _ = try rules(document)
        Issue.record("expected \(document) to be refused")
        return ""
    } catch {
        return error.description
    }
}

/// okhttp's and curl's defaults exempted for app events, Googlebot not.
private let clients = #"""
    {"userAgents": [{"pattern": "^curl"}, {"pattern": "okhttp"}, {"pattern": "Googlebot\\/", "name": "google"}, {"pattern": "curl|wget"}],
     "appExemptions": [{"pattern": "okhttp", "reason": "OkHttp's default"}, {"pattern": "^curl", "reason": "curl's default"}],
     "ipRanges": ["34.64.0.0/10"]}
    """#

extension InvalidTraffic {
    @Suite struct AppExemptions {
        @Test func anExemptedPatternJudgesBeaconsButNotAppEvents() throws {
            let r = try rules(clients)
            let app = try r.userAgentMatcher(for: .app), beacon = try r.userAgentMatcher(for: .beacon)
            #expect(!app.matches("okhttp/4.12.0"))
            #expect(beacon.matches("okhttp/4.12.0"))
            #expect(app.matches("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"))
            #expect(beacon.matches("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"))
            // "curl|wget" is not exempted: curl's default stays declared in app events by it.
            #expect(app.matches("curl/8.5.0"))
            #expect(r.patternIndices(for: .app) == [2, 3])
            #expect(r.patternIndices(for: .beacon) == [0, 1, 2, 3])
        }

        @Test func theDeclaringPatternIsTheFirstThatAppliesToTheEventsChannel() throws {
            let r = try rules(clients)
            #expect(r.declaringPattern(of: Array("curl/8.5.0".utf8), channel: .beacon) == UserAgentRule(pattern: "^curl"))
            #expect(r.declaringPattern(of: Array("curl/8.5.0".utf8), channel: .app) == UserAgentRule(pattern: "curl|wget"))
            #expect(r.declaringPattern(of: Array("okhttp/4.12.0".utf8), channel: .beacon) == UserAgentRule(pattern: "okhttp"))
            #expect(r.declaringPattern(of: Array("okhttp/4.12.0".utf8), channel: .app) == nil)
            #expect(r.declaringPattern(of: Array("Googlebot/2.1".utf8), channel: .app) == UserAgentRule(pattern: "Googlebot\\/", name: "google"))
            #expect(r.declaringPattern(of: Array("Mozilla/5.0 (iPhone)".utf8), channel: .beacon) == nil)
        }

        @Test func theDeclaringPatternOfTheWholeListIsTheFirstOfItsOrder() throws {
            let list = try IVTRuleSet.parse(Array(#"{"userAgentLists": ["list.json"]}"#.utf8)) { _ in Array(crawlerUserAgentsJSON.utf8) }
            guard case .array(let entries) = try JSONReader.parse(Array(crawlerUserAgentsJSON.utf8)) else {
                Issue.record("the list is not an array")
                return
            }
            // Every 200th pattern's first sample (each search compiles the list about twice): the
            // pattern found matches it, and none before it does.
            for (i, rule) in list.userAgents.enumerated() where i % 200 == 0 {
                guard case .array(let instances)? = entries[i].member("instances"), case .string(let sample)? = instances.first else { continue }
                let found = try #require(list.declaringPattern(of: Array(sample.utf8), channel: .beacon), "\(rule.pattern)")
                let at = try #require(list.userAgents.firstIndex(of: found))
                #expect(at <= i)
                #expect(try UserAgentMatcher(patterns: [found.pattern]).matches(sample))
                #expect(try !UserAgentMatcher(patterns: list.userAgents[..<at].map(\.pattern)).matches(sample), "\(sample)")
            }
        }

        @Test func theLabellerGivesOneVerdictPerUserAgentForBothChannels() throws {
            let labeller = try IVTLabeller(version: 1, rules: try rules(clients))
            #expect(labeller.verdict("okhttp/4.12.0") == .inBeaconsOnly)
            #expect(labeller.verdict("curl/8.5.0") == .everywhere)
            #expect(labeller.verdict("Googlebot/2.1") == .everywhere)
            #expect(labeller.verdict("Mozilla/5.0 (iPhone)") == .no)
            #expect(DeclaredBot.inBeaconsOnly.declares(.beacon) && !DeclaredBot.inBeaconsOnly.declares(.app))
            #expect(DeclaredBot.everywhere.declares(.beacon) && DeclaredBot.everywhere.declares(.app))
            #expect(!DeclaredBot.no.declares(.beacon) && !DeclaredBot.no.declares(.app))
        }

        @Test func anExemptedUserAgentIsStillJudgedByTheOtherRules() throws {
            let labeller = try IVTLabeller(version: 1, rules: try rules(clients))
            let bots: [Int32: DeclaredBot] = [1: .inBeaconsOnly, 2: .everywhere]
            let home = IPAddress("192.0.2.7"), cloud = IPAddress("34.64.0.9")
            #expect(labeller.label(userAgent: 1, address: home, channel: .app, declaredBots: bots) == nil)
            #expect(labeller.label(userAgent: 1, address: home, channel: .beacon, declaredBots: bots) == .declaredBot)
            #expect(labeller.label(userAgent: 1, address: cloud, channel: .app, declaredBots: bots) == .datacenter)
            #expect(labeller.label(userAgent: 2, address: home, channel: .app, declaredBots: bots) == .declaredBot)
        }

        @Test func withoutExemptionsBothChannelsAreJudgedAlike() throws {
            let r = try rules(#"{"userAgents": [{"pattern": "okhttp"}]}"#)
            #expect(r.patternIndices(for: .app) == r.patternIndices(for: .beacon))
            #expect(try IVTLabeller(version: 1, rules: r).verdict("okhttp/4.12.0") == .everywhere)
        }

        @Test func anExemptionNamesAPatternOfTheRuleSetOnceAndSaysWhy() {
            let agents = #""userAgents": [{"pattern": "okhttp"}, {"pattern": "^curl"}]"#
            let cases: [(String, String)] = [
                (#"{\#(agents), "appExemptions": [{"pattern": "okhtp", "reason": "typo"}]}"#,
                 #"appExemptions[0].pattern: "okhtp" is none of the rule set's user-agent patterns (userAgents and userAgentLists); an exemption names one exactly as written there"#),
                (#"{\#(agents), "appExemptions": [{"pattern": "OKHTTP", "reason": "case"}]}"#,
                 #"appExemptions[0].pattern: "OKHTTP" is none of the rule set's user-agent patterns (userAgents and userAgentLists); an exemption names one exactly as written there"#),
                (#"{"appExemptions": [{"pattern": "okhttp", "reason": "no patterns at all"}]}"#,
                 #"appExemptions[0].pattern: "okhttp" is none of the rule set's user-agent patterns (userAgents and userAgentLists); an exemption names one exactly as written there"#),
                (#"{\#(agents), "appExemptions": [{"pattern": "okhttp", "reason": "a"}, {"pattern": "^curl", "reason": "b"}, {"pattern": "okhttp", "reason": "c"}]}"#,
                 #"appExemptions[2].pattern: "okhttp" is exempted already by appExemptions[0]"#),
                (#"{\#(agents), "appExemptions": [{"pattern": "okhttp"}]}"#, #"appExemptions[0] has no "reason""#),
                (#"{\#(agents), "appExemptions": [{"reason": "why"}]}"#, #"appExemptions[0] has no "pattern""#),
                (#"{\#(agents), "appExemptions": [{"pattern": "okhttp", "reason": ""}]}"#,
                 "appExemptions[0].reason must be a non-empty string saying why, got an empty string"),
                (#"{\#(agents), "appExemptions": [{"pattern": "okhttp", "reason": "x", "beacons": false}]}"#,
                 #"unknown field "beacons" in appExemptions[0]; the fields are pattern, reason"#),
                (#"{\#(agents), "appExemptions": ["okhttp"]}"#, "appExemptions[0] must be a JSON object, got a string"),
                (#"{\#(agents), "appExemptions": {"pattern": "okhttp"}}"#, "appExemptions must be an array, got an object"),
                (#"{\#(agents), "appExemptions": [{"pattern": 1, "reason": "x"}]}"#, "appExemptions[0].pattern must be a string, got a number"),
            ]
            for (document, expected) in cases {
                #expect(refusal(document) == expected)
            }
        }

        @Test func anExemptionMayNameAPatternOfAList() throws {
            let r = try IVTRuleSet.parse(Array(#"{"userAgentLists": ["list.json"], "appExemptions": [{"pattern": "okhttp", "reason": "OkHttp"}]}"#.utf8)) { _ in
                Array(crawlerUserAgentsJSON.utf8)
            }
            #expect(r.appExemptions == [AppExemption(pattern: "okhttp", reason: "OkHttp")])
            #expect(r.patternIndices(for: .app).count == r.userAgents.count - 1)
            let app = try r.userAgentMatcher(for: .app)
            #expect(!app.matches("okhttp/4.12.0"))
            #expect(app.matches("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"))
        }

        @Test func exemptionsAreStoredOneALineAndReadBackEqual() throws {
            let r = try rules(clients)
            #expect(r.storedDocument == #"""
                {
                  "sources": [],
                  "userAgents": [
                    {"pattern": "^curl"},
                    {"pattern": "okhttp"},
                    {"pattern": "Googlebot\\/", "name": "google"},
                    {"pattern": "curl|wget"}
                  ],
                  "appExemptions": [
                    {"pattern": "okhttp", "reason": "OkHttp's default"},
                    {"pattern": "^curl", "reason": "curl's default"}
                  ],
                  "ipRanges": [
                    "34.64.0.0/10"
                  ]
                }

                """#)
            #expect(try IVTRuleSet.parseStored(Array(r.storedDocument.utf8)) == r)
            #expect(try rules(r.storedDocument) == r)
        }
    }
}

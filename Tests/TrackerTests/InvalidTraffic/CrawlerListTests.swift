import Foundation
import Testing
@testable import TrackerInput

/// The crawler-user-agents list (`CrawlerUserAgentsList.swift`): its patterns and their sample
/// user agents.
private let crawlerList: [(pattern: String, instances: [String])] = {
    guard case .array(let entries) = try? JSONReader.parse(Array(crawlerUserAgentsJSON.utf8)) else { return [] }
    return entries.compactMap { entry in
        guard case .string(let pattern)? = entry.member("pattern"), case .array(let instances)? = entry.member("instances") else { return nil }
        return (pattern, instances.compactMap { if case .string(let s) = $0 { s } else { nil } })
    }
}()

/// Real browsers' user agents, which no crawler pattern should match.
private let browsers = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.0.0",
    "Dalvik/2.1.0 (Linux; U; Android 13; SM-S911B Build/TP1A.220624.014)",
    "MyNewsApp/5.2.1 (iPhone; iOS 17.5; Scale/3.00)",
]

extension InvalidTraffic {
    @Suite struct CrawlerUserAgentsList {
        @Test func everyPatternOfTheListCompilesIntoOneMatcher() throws {
            #expect(crawlerList.count == 1_504)
            let m = try UserAgentMatcher(patterns: crawlerList.map(\.pattern))
            #expect(m.instructionCount < UserAgentMatcher.maxInstructions / 4)
        }

        @Test func everySampleUserAgentMatchesItsOwnPatternAndTheList() throws {
            let all = try UserAgentMatcher(patterns: crawlerList.map(\.pattern))
            var samples = 0
            for (pattern, instances) in crawlerList {
                let own = try UserAgentMatcher(patterns: [pattern])
                for instance in instances {
                    #expect(own.matches(instance), "\(pattern) on \(instance)")
                    #expect(all.matches(instance))
                    samples += 1
                }
            }
            #expect(samples > 2_000)
        }

        @Test func browsersMatchNoPattern() throws {
            let all = try UserAgentMatcher(patterns: crawlerList.map(\.pattern))
            for ua in browsers {
                #expect(!all.matches(ua), "\(ua)")
            }
        }

        /// Each pattern against Foundation's NSRegularExpression on user agents spliced from the
        /// samples and browsers (not adversarial: ICU backtracks).
        @Test func eachPatternAgreesWithICUOnSplicedUserAgents() throws {
            var rng = SplitMix64(seed: 1_504)
            let pool = crawlerList.flatMap(\.instances) + browsers
            var texts: [String] = pool
            for _ in 0..<200 {
                let a = Array(pool[Int(rng.next() % UInt64(pool.count))].utf8)
                let b = Array(pool[Int(rng.next() % UInt64(pool.count))].utf8)
                let cutA = Int(rng.next() % UInt64(a.count + 1)), cutB = Int(rng.next() % UInt64(b.count + 1))
                texts.append(String(decoding: a[..<cutA] + b[cutB...], as: UTF8.self))
            }
            // Every 16th pattern against every text keeps the test quick; all of them are covered
            // together by the list-wide check below.
            for (pattern, _) in crawlerList.enumerated().filter({ $0.offset % 16 == 0 }).map(\.element) {
                let regex = try NSRegularExpression(pattern: pattern, options: [.caseInsensitive])
                let own = try UserAgentMatcher(patterns: [pattern])
                for text in texts {
                    let expected = regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
                    #expect(own.matches(text) == expected, "\(pattern) on \(text)")
                }
            }
            let regexes = try crawlerList.map { try NSRegularExpression(pattern: $0.pattern, options: [.caseInsensitive]) }
            let all = try UserAgentMatcher(patterns: crawlerList.map(\.pattern))
            for text in texts.suffix(200) + browsers {
                let expected = regexes.contains { $0.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil }
                #expect(all.matches(text) == expected, "\(text)")
            }
        }

        /// 10 000 distinct random 512-byte user agents against the whole list: the cache stays
        /// within its cap, and the work stays within the documented bound per byte.
        @Test func aFloodOfRandomUserAgentsCostsBoundedWorkAndMemory() throws {
            let m = try UserAgentMatcher(patterns: crawlerList.map(\.pattern))
            var rng = SplitMix64(seed: 512)
            // Printable ASCII and a few fragments of patterns, so that partial matches abound.
            let fragments = ["bot", "Bot/", "crawl", "spider", "http", "Google", "/2.", " (", "; ", "compatible"].map { Array($0.utf8) }
            var peak = 0
            var ua: [UInt8] = []
            ua.reserveCapacity(512)
            for _ in 0..<10_000 {
                ua.removeAll(keepingCapacity: true)
                while ua.count < 512 {
                    if rng.next() % 8 == 0 {
                        ua += fragments[Int(rng.next() % UInt64(fragments.count))]
                    } else {
                        ua.append(UInt8(0x20 + rng.next() % 95))
                    }
                }
                ua.removeLast(ua.count - 512)
                _ = m.matches(ua)
                peak = max(peak, m.cachedStates)
            }
            let s = m.statistics
            #expect(peak <= UserAgentMatcher.maxCachedStates)
            #expect(s.statesBuilt <= s.bytesScanned + 10_000)
            #expect(s.instructionsVisited <= (3 * s.bytesScanned + 2 * 10_000) * m.instructionCount)
            // In practice far below the bound: most bytes follow a cached transition.
            #expect(s.statesBuilt < s.bytesScanned / 4, "\(s)")
        }
    }
}

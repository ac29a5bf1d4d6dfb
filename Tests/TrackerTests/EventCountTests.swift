import Foundation
import Testing
@testable import Tracker

/// The rate limiter's scan: for a body the decoder takes, the same number of events, found
/// without parsing; `nil` when there is no `events` array to count.
struct EventCountTests {
    private func count(_ text: String) -> Int? {
        Array(text.utf8).withUnsafeBytes { BatchDecoder.eventCount(in: $0) }
    }

    private func decodedCount(_ bytes: [UInt8]) throws -> Int {
        let batch = try BatchDecoder().decode(bytes, receivedAt: Timestamp(rfc3339: "2026-11-20T10:00:05Z")!)
        return batch.accepted.count + batch.rejected.count
    }

    @Test func countsTheElementsOfTheEventsArray() {
        #expect(count(#"{"events":[]}"#) == 0)
        #expect(count(#"{"events":[{}]}"#) == 1)
        #expect(count(#" { "sentAt" : "x" , "events" : [ {"a":[1,2,{"b":"]"}]} , 7, "s" , null ] } "#) == 4)
        #expect(count(#"{"events":[{"id":"a\"],[{,"}, {"x":"\\"}]}"#) == 2, "brackets and commas inside strings, escaped quotes and backslashes")
        #expect(count(#"{"other":[1,2,3],"events":[{"events":[1,2,3]}]}"#) == 1, "only the top-level events array counts")
    }

    @Test func theLastEventsMemberCountsAsTheDecoderTakesIt() throws {
        let body = #"{"events":[{},{}],"events":[{}]}"#
        #expect(count(body) == 1)
        #expect(try decodedCount(Array(body.utf8)) == 1)
    }

    @Test func givesUpWhereOnlyAParseCouldTell() {
        #expect(count(#"{"\u0065vents":[{},{}]}"#) == nil, "an escaped key")
        #expect(count(#"{"events":[1],"\u0065vents":[1,2]}"#) == nil, "an escaped key after the events array could replace it")
        #expect(count(#"{"events":{"a":[1,2]}}"#) == nil, "events is not an array")
        #expect(count(#"[{"events":[1]}]"#) == nil, "not an object")
        #expect(count(#"{"events":[{},{}"#) == nil, "cut off")
        #expect(count(#"{"events":["abc"#) == nil, "cut off inside a string")
        #expect(count("") == nil)
    }

    @Test func agreesWithTheDecoderOnGeneratedBatches() throws {
        var rng = SystemRandomNumberGenerator()
        let awkward = ["", "]", "[", "{", "}", ",", "\"", "\\", "événement", "😀", "\u{202E}", "a\nb", "\u{0}"]
        for _ in 0..<300 {
            let events: [Any] = (0..<Int.random(in: 0...40, using: &rng)).map { _ -> Any in
                switch Int.random(in: 0..<5, using: &rng) {
                case 0: return Int.random(in: -5...5, using: &rng)
                case 1: return awkward.randomElement(using: &rng)!
                case 2: return [awkward.randomElement(using: &rng)!: [1, ["x": awkward.randomElement(using: &rng)!]]]
                case 3: return NSNull()
                default:
                    return ["id": UUID().uuidString.lowercased(), "type": "impression", "requestId": "r", "adUnit": "/1/a",
                            "formatId": "1", "occurredAt": "2026-11-20T10:00:01Z",
                            "attributes": ["k": awkward.randomElement(using: &rng)!, "n": [1.5, true]]]
                }
            }
            let bytes = Array(try JSONSerialization.data(withJSONObject: ["events": events, "sentAt": "2026-11-20T10:00:03Z"],
                                                         options: [.prettyPrinted, .withoutEscapingSlashes]))
            let counted = bytes.withUnsafeBytes { BatchDecoder.eventCount(in: $0) }
            #expect(counted == events.count)
            #expect(try decodedCount(bytes) == events.count)
        }
    }
}

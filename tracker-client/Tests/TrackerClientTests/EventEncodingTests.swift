import Foundation
import Testing
@testable import TrackerClient

@Suite struct EventEncodingTests {
    @Test func idsAreVersion7WithTheMillisecondFirstSoTheySortByTime() {
        let earlier = EventID.make(wallMicros: 1_795_168_800_000_000)
        let later = EventID.make(wallMicros: 1_795_168_800_001_500)
        for id in [earlier, later] {
            let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 7, "version 7")
            #expect(bytes[8] >> 6 == 0b10, "RFC 9562 variant")
        }
        let text = { (id: UUID) -> String in
            var out: [UInt8] = []
            EventID.appendText(id, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        #expect(text(earlier).hasPrefix("01a1f866-0d00-7"), "2026-11-20T10:00:00Z in milliseconds")
        #expect(text(earlier) < text(later))
        #expect(text(earlier) == earlier.uuidString.lowercased())
        #expect(Set((0..<1000).map { _ in EventID.make(wallMicros: 0) }).count == 1000, "random bits keep ids of one instant apart")
    }

    @Test func timesAreRFC3339UTCWithMicroseconds() {
        func text(_ micros: Int64) -> String {
            var out: [UInt8] = []
            JSONWriting.appendTimestamp(micros: micros, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        #expect(text(1_795_168_801_950_123) == "2026-11-20T10:00:01.950123Z")
        #expect(text(0) == "1970-01-01T00:00:00.000000Z")
        #expect(text(951_782_400_000_000) == "2000-02-29T00:00:00.000000Z")
        #expect(text(-1) == "1969-12-31T23:59:59.999999Z")
    }

    @Test func stringsAreEscapedAsJSONRequires() throws {
        var out: [UInt8] = []
        JSONWriting.appendString("a\"b\\c\nd\u{1}é", to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "\"a\\\"b\\\\c\\nd\\u0001é\"")
        let parsed = try JSONSerialization.jsonObject(with: Data(out), options: [.fragmentsAllowed]) as? String
        #expect(parsed == "a\"b\\c\nd\u{1}é")
    }

    @Test func anAttributeNumberThatIsNotJSONGoesAsAString() {
        #expect(JSONWriting.isNumber("42"))
        #expect(JSONWriting.isNumber("-4.20e+3"))
        #expect(!JSONWriting.isNumber("042"))
        #expect(!JSONWriting.isNumber("4."))
        #expect(!JSONWriting.isNumber("NaN"))
        #expect(!JSONWriting.isNumber(""))
    }

    @Test func gzipRoundTrips() throws {
        let body = Array(String(repeating: "{\"type\":\"impression\"},", count: 500).utf8)
        let compressed = Gzip.compress(body)
        #expect(compressed.count < body.count / 10)
        #expect(Array(compressed.prefix(2)) == [0x1F, 0x8B], "a gzip member")
        #expect(try gunzip(compressed) == body)
    }
}

import Foundation
import Logging
import Testing
import Tracker
@testable import TrackerServer

/// The two line formats of `LineLogHandler`.
struct LineLogHandlerTests {
    let time = Timestamp(microseconds: 1_795_000_000_123_456)

    @Test func aJSONLineIsOneObjectWithTheFixedKeysThenTheMetadataSorted() throws {
        let line = LineLogHandler.line(format: .json, time: time, level: .warning, label: "tracker",
                                       message: "group write failed: \"quoted\"\nsecond line",
                                       metadata: ["tracker.request_id": "r-1", "b": .array(["x", .dictionary(["k": "v"])]),
                                                  "message": "shadowed"])
        #expect(line.hasSuffix("}\n"))
        #expect(line.dropLast().contains("\n") == false, "a newline in the message is escaped")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["time"] as? String == time.rfc3339)
        #expect(object["level"] as? String == "warning")
        #expect(object["message"] as? String == "group write failed: \"quoted\"\nsecond line")
        #expect(object["tracker.request_id"] as? String == "r-1")
        #expect((object["b"] as? [Any])?.count == 2)
        #expect(line.hasPrefix("{\"time\":\"\(time.rfc3339)\",\"level\":\"warning\",\"logger\":\"tracker\",\"message\":"))
        #expect(line.range(of: "\"b\":")!.lowerBound < line.range(of: "\"tracker.request_id\":")!.lowerBound)
    }

    @Test func aTextLineReadsAsTimeLevelLabelMessageAndKeyValues() {
        let line = LineLogHandler.line(format: .text, time: time, level: .info, label: "tracker",
                                       message: "Server started", metadata: ["tracker.request_id": "r-1", "a": "1"])
        #expect(line == "\(time.rfc3339) info tracker: Server started a=1 tracker.request_id=r-1\n")
    }

    @Test func unknownFormatsAndLevelsAreRefusedByName() {
        #expect(throws: LogSettingError.format("yaml")) { try LogSettings.resolve(server: true, format: "yaml", level: nil) }
        #expect(throws: LogSettingError.level("loud")) { try LogSettings.resolve(server: true, format: "json", level: "loud") }
        #expect(try! LogSettings.resolve(server: true, format: "JSON", level: "Debug").level == .debug)
    }

    @Test func aSaneRequestIDIsKeptAndAnythingElseIsNot() {
        #expect(ClientRequestID.sane("lb-0192f3a4/7b1c") == "lb-0192f3a4/7b1c")
        #expect(ClientRequestID.sane(String(repeating: "a", count: 128)) != nil)
        #expect(ClientRequestID.sane(String(repeating: "a", count: 129)) == nil)
        #expect(ClientRequestID.sane("") == nil)
        #expect(ClientRequestID.sane("two words") == nil)
        #expect(ClientRequestID.sane("é") == nil)
    }
}

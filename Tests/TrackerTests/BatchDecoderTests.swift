import Foundation
import Testing
@testable import Tracker

/// The server's clock in these tests: 2026-11-20T10:00:05Z.
private let received = Timestamp(rfc3339: "2026-11-20T10:00:05Z")!

/// A valid impression; `fields` replace or add members (`NSNull()` writes `null`, `Absent()` removes).
private func event(_ fields: [String: Any] = [:]) -> [String: Any] {
    var e: [String: Any] = [
        "id": "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11", "type": "impression", "requestId": "req-7f3c",
        "adUnit": "/21775744923/home/native", "formatId": "10063170", "occurredAt": "2026-11-20T10:00:01.950Z",
    ]
    for (k, v) in fields { e[k] = v is Absent ? nil : v }
    return e
}

private struct Absent {}

private func body(_ events: [Any], sentAt: Any? = nil) -> [UInt8] {
    var b: [String: Any] = ["events": events]
    if let sentAt { b["sentAt"] = sentAt }
    return Array(try! JSONSerialization.data(withJSONObject: b))
}

private func decode(_ bytes: [UInt8], at receivedAt: Timestamp = received) throws(BatchError) -> DecodedBatch {
    try BatchDecoder().decode(bytes, receivedAt: receivedAt)
}

/// The one event of a batch, or its rejection message.
private func outcome(_ e: [String: Any], sentAt: Any? = nil, at receivedAt: Timestamp = received) throws -> Result<TrackingEvent, RejectedEvent> {
    let batch = try decode(body([e], sentAt: sentAt), at: receivedAt)
    if let r = batch.rejected.first { return .failure(RejectedEvent(message: r.error)) }
    return .success(try #require(batch.accepted.first).event)
}

private struct RejectedEvent: Error { var message: String }

private func accepted(_ e: [String: Any], sentAt: Any? = nil, at receivedAt: Timestamp = received) throws -> TrackingEvent {
    switch try outcome(e, sentAt: sentAt, at: receivedAt) {
    case .success(let event): return event
    case .failure(let r):
        Issue.record("expected the event to be accepted, got: \(r.message)")
        throw r
    }
}

/// The rejection message; the test fails when the event was accepted.
private func rejection(_ e: [String: Any], sentAt: Any? = nil, at receivedAt: Timestamp = received) throws -> String {
    switch try outcome(e, sentAt: sentAt, at: receivedAt) {
    case .success: Issue.record("expected a rejection"); return ""
    case .failure(let r): return r.message
    }
}

private func ts(_ text: String) -> Timestamp { Timestamp(rfc3339: text)! }

@Suite struct EventFieldRules {
    @Test func minimalImpressionIsAcceptedWithSpecDefaults() throws {
        let e = try accepted(event())
        #expect(e.id.text == "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11")
        #expect(e.type == .impression)
        #expect(e.source == .app)
        #expect(!e.eea && !e.reservation && !e.test)
        #expect(e.assetKey == nil && e.clickAction == nil && e.adapter == nil && e.attributes.isEmpty)
        #expect(e.receivedAt == received && e.sentAt == nil)
    }

    @Test func everyFieldIsKept() throws {
        let e = try accepted(event([
            "type": "click", "assetKey": "MainImage", "clickAction": "custom_handler", "source": "mediation",
            "adapter": "ExampleNetwork", "eea": true, "reservation": true, "test": true,
            "attributes": ["appVersion": "4.2.0", "build": 42, "beta": false],
        ]))
        #expect(e.type == .click && e.assetKey == "MainImage" && e.clickAction == .customHandler)
        #expect(e.source == .mediation && e.adapter == "ExampleNetwork" && e.eea && e.reservation && e.test)
        #expect(e.attributes.count == 3)
        let json = try #require(e.attributesJSON)
        let parsed = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
        #expect(parsed?["appVersion"] as? String == "4.2.0")
        #expect(parsed?["build"] as? Int == 42)
        #expect(parsed?["beta"] as? Bool == false)
    }

    @Test func idIsRequiredAndMustBeAUUIDOfAnyVersion() throws {
        #expect(try rejection(event(["id": Absent()])).hasPrefix("id is required"))
        #expect(try rejection(event(["id": NSNull()])).hasPrefix("id is required"))
        #expect(try rejection(event(["id": "not-a-uuid"])).contains("id must be a UUID"))
        #expect(try rejection(event(["id": 12])).contains("id must be a string"))
        #expect(try accepted(event(["id": "6F9619FF-8B86-D011-B42D-00C04FC964FF"])).id.text == "6f9619ff-8b86-d011-b42d-00c04fc964ff")
        #expect(try accepted(event(["id": "550e8400-e29b-41d4-a716-446655440000"])).id.text == "550e8400-e29b-41d4-a716-446655440000")
    }

    @Test func typeMustBeOneOfTheProtocolsTypes() throws {
        for type in EventType.allCases where type != .click && !type.isLoadEvent {
            #expect(try accepted(event(["type": type.rawValue])).type == type)
        }
        #expect(try rejection(event(["type": "view"])).contains("type must be one of ad_loaded, impression, click"))
        #expect(try rejection(event(["type": "Impression"])).contains("type must be one of"))
        #expect(try rejection(event(["type": Absent()])).hasPrefix("type is required"))
    }

    @Test func requestIdIsOneTo128CharactersWithoutControlCharacters() throws {
        #expect(try accepted(event(["requestId": String(repeating: "r", count: 128)])).requestId?.count == 128)
        #expect(try accepted(event(["requestId": String(repeating: "é", count: 128)])).requestId?.unicodeScalars.count == 128)
        #expect(try rejection(event(["requestId": String(repeating: "r", count: 129)])).contains("requestId must be at most 128 characters, got 129"))
        #expect(try rejection(event(["requestId": ""])).contains("requestId must not be empty"))
        #expect(try rejection(event(["requestId": "req\n1"])).contains("requestId must not contain control characters"))
        #expect(try rejection(event(["requestId": "req\u{85}1"])).contains("control characters"))
        #expect(try accepted(event(["requestId": "广告-🙂"])).requestId == "广告-🙂")
    }

    @Test func adUnitIsSlashNetworkCodeAndSegments() throws {
        for good in ["/6499/example/native", "/21775744923/example/native", "/1/a", "/1234/a/b/c-d_e.f"] {
            #expect(try accepted(event(["adUnit": good])).adUnit == good)
        }
        for bad in ["6499/example/native", "/abc/native", "/6499", "/6499/", "/6499//native", "/6499/native/",
                    "//native", "/64a9/native", ""] {
            #expect(try rejection(event(["adUnit": bad])).contains("adUnit must be '/' + the network code"), "\(bad)")
        }
        // A path of the right shape with a blank in a segment: the message names that rule.
        for bad in ["/6499/my native", "/6499/a\u{A0}b", "/6499/a\u{0}", "/6499/tab\there"] {
            #expect(try rejection(event(["adUnit": bad])).contains("adUnit must not contain spaces or control characters"), "\(bad)")
        }
        let longest = "/1/" + String(repeating: "a", count: 253)
        #expect(try accepted(event(["adUnit": longest])).adUnit.count == 256)
        #expect(try rejection(event(["adUnit": longest + "a"])).contains("adUnit must be at most 256 characters, got 257"))
    }

    @Test func formatIdIsDigitsOrASystemFormat() throws {
        for good in ["10063170", "1", "native", "app_install", "content"] {
            #expect(try accepted(event(["formatId": good])).formatId == good)
        }
        for bad in ["", "abc", "1006317a", "Native", "-1", " 1"] {
            #expect(try rejection(event(["formatId": bad])).contains("formatId must be a custom native format ID"), "\(bad)")
        }
        #expect(try rejection(event(["formatId": 10063170])).contains("formatId must be a string, got a number"))
        #expect(try accepted(event(["formatId": String(repeating: "1", count: 64)])).formatId.count == 64)
        #expect(try rejection(event(["formatId": String(repeating: "1", count: 65)])).contains("formatId must be at most 64 digits, got 65"))
    }

    @Test func occurredAtIsRFC3339WithZoneKeptToTheMicrosecond() throws {
        #expect(try accepted(event(["occurredAt": "2026-11-20T10:00:01Z"])).occurredAt == ts("2026-11-20T10:00:01.000000Z"))
        #expect(try accepted(event(["occurredAt": "2026-11-20T12:00:01.5+02:00"])).occurredAt == ts("2026-11-20T10:00:01.500Z"))
        #expect(try accepted(event(["occurredAt": "2026-11-20T09:30:01.123456789-00:30"])).occurredAt.microseconds
                == ts("2026-11-20T10:00:01Z").microseconds + 123_456)
        for bad in ["2026-11-20T10:00:01", "2026-11-20", "2026-02-30T10:00:00Z", "2026-11-20T24:00:00Z",
                    "2026-11-20T10:00:01.Z", "20261120T100001Z", "2026-11-20T10:00:01+0200", "yesterday"] {
            #expect(try rejection(event(["occurredAt": bad])).contains("occurredAt must be an RFC 3339 time"), "\(bad)")
        }
        #expect(try rejection(event(["occurredAt": 1_763_632_801])).contains("occurredAt must be a string"))
    }

    @Test func assetKeyIsRequiredForClickOnly() throws {
        #expect(try rejection(event(["type": "click"])).hasPrefix("assetKey is required for click"))
        #expect(try accepted(event(["type": "click", "assetKey": "Headline"])).assetKey == "Headline")
        #expect(try accepted(event(["type": "impression"])).assetKey == nil)
        #expect(try accepted(event(["type": "adchoices_click"])).assetKey == nil)
        #expect(try accepted(event(["type": "click", "assetKey": String(repeating: "k", count: 64)])).assetKey?.count == 64)
        #expect(try rejection(event(["type": "click", "assetKey": String(repeating: "k", count: 65)])).contains("assetKey must be at most 64 characters"))
        #expect(try rejection(event(["type": "click", "assetKey": ""])).contains("assetKey must not be empty"))
    }

    @Test func clickActionSourceAndAdapterFollowTheirRules() throws {
        for action in ClickAction.allCases {
            #expect(try accepted(event(["clickAction": action.rawValue])).clickAction == action)
        }
        #expect(try rejection(event(["clickAction": "browser"])).contains("clickAction must be one of custom_handler, deep_link, destination_url"))
        for source in EventSource.allCases {
            #expect(try accepted(event(["source": source.rawValue])).source == source)
        }
        #expect(try accepted(event(["source": NSNull()])).source == .app)
        #expect(try rejection(event(["source": "network"])).contains("source must be one of app, sdk, mediation"))
        #expect(try accepted(event(["adapter": String(repeating: "a", count: 64)])).adapter?.count == 64)
        #expect(try rejection(event(["adapter": String(repeating: "a", count: 65)])).contains("adapter must be at most 64 characters"))
    }

    @Test func flagsMustBeBooleans() throws {
        #expect(try accepted(event(["eea": true, "reservation": false, "test": NSNull()])).eea)
        for flag in ["eea", "reservation", "test"] {
            #expect(try rejection(event([flag: "true"])).contains("\(flag) must be true or false, got a string"))
            #expect(try rejection(event([flag: 1])).contains("\(flag) must be true or false"))
        }
    }

    @Test func attributesAreAFlatObjectOfAtMost32KeysAnd2KiB() throws {
        let thirtyTwo = Dictionary(uniqueKeysWithValues: (0..<32).map { ("k\($0)", $0) })
        #expect(try accepted(event(["attributes": thirtyTwo])).attributes.count == 32)
        let thirtyThree = Dictionary(uniqueKeysWithValues: (0..<33).map { ("k\($0)", $0) })
        #expect(try rejection(event(["attributes": thirtyThree])).contains("attributes has 33 keys; at most 32"))
        #expect(try rejection(event(["attributes": ["nested": ["a": 1]]])).contains("attributes.nested must be a string, number or boolean"))
        #expect(try rejection(event(["attributes": ["list": [1, 2]]])).contains("attributes.list must be a string, number or boolean"))
        #expect(try rejection(event(["attributes": ["gone": NSNull()]])).contains("attributes.gone must be a string, number or boolean"))
        #expect(try rejection(event(["attributes": "appVersion=4"])).contains("attributes must be an object"))
        // {"a":"…"} is 8 bytes of JSON around the value.
        #expect(try accepted(event(["attributes": ["a": String(repeating: "x", count: 2048 - 8)]])).attributes.count == 1)
        #expect(try rejection(event(["attributes": ["a": String(repeating: "x", count: 2048 - 7)]])).contains("attributes is 2049 bytes as JSON; at most 2048"))
    }

    /// Every number the decoder accepts must be one PostgreSQL's jsonb stores: `1e-20000` reads
    /// as the double 0.0, and jsonb refused it (22003), which cost the whole batch on every retry.
    @Test func attributeNumbersThatJsonbCannotStoreAreRejectedNamingTheRule() throws {
        for refused in ["1e-20000", "0e-20000", "1e-400", "0.0e-1001", "0e1001", "1e400", "-1e-325",
                        "0." + String(repeating: "0", count: 1001), "1e-1000"] {
            let bytes = Array(#"{"events":[{"id":"0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11","type":"impression","requestId":"r","adUnit":"/1/a","formatId":"1","occurredAt":"2026-11-20T10:00:01Z","attributes":{"n":\#(refused)}}]}"#.utf8)
            let message = try #require(try decode(bytes).rejected.first?.error, "\(refused) must be rejected")
            #expect(message.contains("attributes.n is a number the log cannot store"), "\(refused): \(message)")
            #expect(message.contains("exponent from -1000 to 1000"))
        }
        for kept in ["5e-324", "1.7976931348623157e308", "-0", "0e-1000", "1E+2", "0.000001e-300", "123456789012345678901234567890"] {
            let bytes = Array(#"{"events":[{"id":"0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11","type":"impression","requestId":"r","adUnit":"/1/a","formatId":"1","occurredAt":"2026-11-20T10:00:01Z","attributes":{"n":\#(kept)}}]}"#.utf8)
            #expect(try decode(bytes).accepted.count == 1, "\(kept) must be accepted")
        }
    }

    @Test func attributeNumbersKeepTheirText() throws {
        let bytes = Array(#"{"events":[{"id":"0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11","type":"impression","requestId":"r","adUnit":"/1/a","formatId":"1","occurredAt":"2026-11-20T10:00:01Z","attributes":{"price":4.20,"big":123456789012345678901234567890,"huge":1e400}}]}"#.utf8)
        let batch = try decode(bytes)
        #expect(batch.rejected.first?.error.contains("attributes.huge is a number the log cannot store") == true)
        let fixed = Array(String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: ",\"huge\":1e400", with: "").utf8)
        let e = try #require(try decode(fixed).accepted.first?.event)
        #expect(e.attributesJSON == #"{"price":4.20,"big":123456789012345678901234567890}"#)
    }

    @Test func everyBrokenRuleOfAnEventIsListedInOneMessage() throws {
        let message = try rejection(event(["type": "click", "adUnit": "home", "formatId": "x"]))
        #expect(message.contains("adUnit must be"))
        #expect(message.contains("formatId must be"))
        #expect(message.contains("assetKey is required for click"))
    }

    @Test func unknownFieldsAreIgnored() throws {
        #expect(try accepted(event(["futureField": ["any": "thing"]])).type == .impression)
    }
}

@Suite struct BatchRules {
    @Test func invalidEventsAreRejectedByIndexAndIdWhileTheOthersAreAccepted() throws {
        let batch = try decode(body([event(["id": "11111111-1111-1111-1111-111111111111"]),
                                     event(["id": "22222222-2222-2222-2222-222222222222", "type": "click"]),
                                     "not an object",
                                     event(["id": "33333333-3333-3333-3333-333333333333"])]))
        #expect(batch.accepted.map(\.index) == [0, 3])
        #expect(batch.rejected.map(\.index) == [1, 2])
        #expect(batch.rejected[0].id == "22222222-2222-2222-2222-222222222222")
        #expect(batch.rejected[0].error.hasPrefix("assetKey is required for click"))
        #expect(batch.rejected[1].id == nil)
        #expect(batch.rejected[1].error == "the event must be a JSON object, got a string")
    }

    @Test func fiveHundredEventsAreAcceptedAndFiveHundredOneAreTooMany() throws {
        let ids = (0..<501).map { String(format: "00000000-0000-7000-8000-%012d", $0) }
        #expect(try decode(body(ids.prefix(500).map { event(["id": $0]) })).accepted.count == 500)
        #expect(throws: BatchError.tooManyEvents(count: 501, limit: 500)) {
            try decode(body(ids.map { event(["id": $0]) }))
        }
    }

    @Test func bodyOver512KiBIsTooLarge() throws {
        let big = [UInt8](repeating: 0x20, count: 512 * 1024 + 1)
        #expect(throws: BatchError.bodyTooLarge(bytes: 512 * 1024 + 1, limit: 512 * 1024)) { try decode(big) }
        // Exactly the limit is still read (here: whitespace around an empty batch).
        var exact = Array(#"{"events":[]}"#.utf8)
        exact += [UInt8](repeating: 0x20, count: 512 * 1024 - exact.count)
        #expect(try decode(exact).accepted.isEmpty)
    }

    @Test func eventOver16KiBMakesTheBatchTooLarge() throws {
        let padding = String(repeating: "x", count: 16 * 1024)
        #expect {
            try decode(body([event(), event(["id": "11111111-1111-1111-1111-111111111111", "padding": padding])]))
        } throws: { error in
            guard case .eventTooLarge(let index, let bytes, 16384)? = error as? BatchError else { return false }
            return index == 1 && bytes > 16 * 1024
        }
    }

    @Test func bodiesThatAreNotABatchAreRefusedWhole() throws {
        #expect { try decode(Array("{nope".utf8)) } throws: { ($0 as? BatchError)?.message.contains("not valid JSON") == true }
        #expect { try decode(Array("[]".utf8)) } throws: { ($0 as? BatchError)?.message.contains("must be a JSON object") == true }
        #expect { try decode(Array(#"{"evts":[]}"#.utf8)) } throws: { ($0 as? BatchError)?.message.contains("'events' array") == true }
        #expect { try decode(Array(#"{"events":{}}"#.utf8)) } throws: { ($0 as? BatchError)?.message.contains("events must be an array") == true }
        #expect { try decode(Array(#"{"events":[]} x"#.utf8)) } throws: { ($0 as? BatchError)?.message.contains("not valid JSON") == true }
        #expect { try decode(body([event()], sentAt: "now")) } throws: { ($0 as? BatchError)?.message.contains("sentAt must be an RFC 3339 time") == true }
        #expect { try decode(body([event()], sentAt: 5)) } throws: { ($0 as? BatchError)?.message.contains("sentAt must be") == true }
    }

    @Test func emptyBatchIsValid() throws {
        let batch = try decode(Array(#"{"events":[]}"#.utf8))
        #expect(batch.accepted.isEmpty && batch.rejected.isEmpty)
    }
}

@Suite struct TimeCorrection {
    @Test func withoutSentAtAnEarlierDeviceTimeIsKept() throws {
        #expect(try accepted(event(["occurredAt": "2026-11-20T09:00:00Z"])).correctedAt == ts("2026-11-20T09:00:00Z"))
    }

    @Test func withoutSentAtADeviceAheadOfTheServerIsClampedToReceivedAt() throws {
        let e = try accepted(event(["occurredAt": "2026-11-20T12:00:00Z"]))
        #expect(e.correctedAt == received)
        #expect(e.occurredAt == ts("2026-11-20T12:00:00Z"))
    }

    @Test func withoutSentAtExactly24HoursAheadIsAcceptedAndOneMicrosecondMoreIsRejected() throws {
        #expect(try accepted(event(["occurredAt": "2026-11-21T10:00:05Z"])).correctedAt == received)
        #expect(try rejection(event(["occurredAt": "2026-11-21T10:00:05.000001Z"])).contains("more than 24 h after the server's time"))
    }

    @Test func withSentAtTheDeviceClockOffsetCancelsOut() throws {
        // The device clock is 1 h behind: it says 09:00:03.120 when the server says 10:00:05.
        let e = try accepted(event(["occurredAt": "2026-11-20T09:00:01.950Z"]), sentAt: "2026-11-20T09:00:03.120Z")
        #expect(e.correctedAt == ts("2026-11-20T10:00:03.830Z"))
        #expect(e.sentAt == ts("2026-11-20T09:00:03.120Z"))
    }

    @Test func withSentAtOneSecondAfterSentAtIsAcceptedAndOneMicrosecondMoreIsRejected() throws {
        let sentAt = "2026-11-20T10:00:03Z"
        #expect(try accepted(event(["occurredAt": "2026-11-20T10:00:04Z"]), sentAt: sentAt).correctedAt == ts("2026-11-20T10:00:06Z"))
        #expect(try rejection(event(["occurredAt": "2026-11-20T10:00:04.000001Z"]), sentAt: sentAt).contains("more than 1 s after the batch's sentAt"))
    }

    @Test func withSentAtTheDeviceMayBeFarAheadOfTheServer() throws {
        // sentAt decides, not the 24 h rule: a device 3 days ahead is corrected back.
        let e = try accepted(event(["occurredAt": "2026-11-23T10:00:00Z"]), sentAt: "2026-11-23T10:00:02Z")
        #expect(e.correctedAt == ts("2026-11-20T10:00:03Z"))
    }

    @Test func correctedTimesBefore1970AreRejected() throws {
        #expect(try rejection(event(["occurredAt": "1969-12-31T23:59:59Z"])).contains("before 1970-01-01"))
        #expect(try rejection(event(["occurredAt": "0001-01-01T00:00:00Z"]), sentAt: "9999-12-31T23:59:59Z").contains("before 1970-01-01"))
    }

    @Test func correctedTimeDecidesTheUTCDayAcrossMidnight() throws {
        let e = try accepted(event(["occurredAt": "2026-11-20T00:30:00+01:00"]))
        #expect(e.correctedAt.day.description == "2026-11-19")
    }
}

@Suite struct JSONReading {
    @Test func escapesAndSurrogatePairsDecode() throws {
        let v = try JSONReader.parse(Array(#"["a\"b\\c\/d\n\t\u00e9\ud83d\ude00"]"#.utf8))
        #expect(v == .array([.string("a\"b\\c/d\n\té😀")]))
    }

    @Test func malformedTextIsRefused() throws {
        for bad in [#"["\ud800"]"#, #"["\udc00"]"#, #"["a"#, "[1,]", "[01]", "[1.]", "[-]", "[tru]", "{\"a\" 1}",
                    "[\"tab\there\"]", "[\"\\x\"]", "", "   "] {
            #expect(throws: JSONSyntaxError.self, "\(bad)") { try JSONReader.parse(Array(bad.utf8)) }
        }
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse([0x5B, 0x22, 0xFF, 0x22, 0x5D]) }  // ["\xFF"]
        // A 4-byte sequence cut after 3 bytes decodes to one 3-byte U+FFFD: same length, other bytes.
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse([0x5B, 0x22, 0xF0, 0x9F, 0x98, 0x61, 0x22, 0x5D]) }
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse([0x5B, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x5D]) }  // a surrogate
        #expect(try JSONReader.parse(Array("[\"ok \u{FFFD} 😀\"]".utf8)) == .array([.string("ok \u{FFFD} 😀")]))
    }

    @Test func deepNestingIsRefusedInsteadOfExhaustingTheStack() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(Array(deep.utf8)) }
    }

    @Test func quotedTextRoundTrips() throws {
        let text = "quote\" backslash\\ nl\n nul\u{0} bell\u{7} é 😀"
        var out = ""
        JSONText.appendQuoted(text, to: &out)
        #expect(try JSONReader.parse(Array(out.utf8)) == .string(text))
    }

    /// Report bodies are written as bytes: the same literal as the `String` writer, escapes at
    /// either end, between runs, or none at all.
    @Test(arguments: ["", "plain", "\"", "\\", "\n\r\t", "\"a\"", "a\u{1}b", "é 😀", "/1234/home/native", "end\\", "\u{1f}start"])
    func quotedBytesAreTheQuotedString(_ text: String) throws {
        var bytes: [UInt8] = []
        JSONText.appendQuoted(text, to: &bytes)
        var string = ""
        JSONText.appendQuoted(text, to: &string)
        #expect(bytes == Array(string.utf8))
        #expect(try JSONReader.parse(bytes) == .string(text))
        // A report body writes its strings the same way, into memory sized beforehand.
        let written = [UInt8](unsafeUninitializedCapacity: ReportValue.text(text).byteBound) { buffer, count in
            var writer = RawWriter(UnsafeMutableRawBufferPointer(buffer))
            writer.jsonString(text)
            count = writer.count
        }
        #expect(written == bytes)
    }

    /// Counts in a report body are digits as `String(n)` writes them.
    @Test func countsAreWrittenAsStringWritesThem() {
        for n: Int64 in [0, 1, 9, 10, 99, 100, 1_234_567, -1, -10, .max, .min] {
            let out = [UInt8](unsafeUninitializedCapacity: 1 + ReportValue.count(n).byteBound) { buffer, count in
                var writer = RawWriter(UnsafeMutableRawBufferPointer(buffer))
                writer.byte(UInt8(ascii: "x"))
                writer.decimal(n)
                count = writer.count
            }
            #expect(out == Array(("x" + String(n)).utf8), "\(n)")
        }
    }
}

/// PROTOCOL.md 10's field table: each rule refuses the event naming the field, and keeps the
/// rest of the batch.
@Suite struct FunnelFieldRules {
    /// A valid event of a load: no requestId, a loadId.
    private func loadEvent(_ type: String, _ fields: [String: Any] = [:]) -> [String: Any] {
        event(["type": type, "requestId": Absent(), "loadId": "load-1", "formatId": Absent()].merging(fields) { $1 })
    }

    @Test func aRequestAFailureAndAMediationResultAreAcceptedWithTheirFields() throws {
        let request = try accepted(loadEvent("ad_request", ["adsRequested": 3, "formatId": "10063170"]))
        #expect(request.requestId == nil && request.loadId == "load-1" && request.adsRequested == 3 && request.formatId == "10063170")
        #expect(request.logKey == "load-1", "the log keeps a load's events under its id")
        #expect(try accepted(loadEvent("ad_request")).adsRequested == 1, "adsRequested defaults to 1")
        #expect(try accepted(loadEvent("ad_request")).formatId == "", "a load that asks for no format")
        let failed = try accepted(loadEvent("ad_failed", ["errorCode": "no_fill", "latencyMs": 1250]))
        #expect(failed.errorCode == .noFill && failed.latencyMs == 1250)
        let result = try accepted(loadEvent("mediation_result", ["result": "failed", "errorCode": "mediation_no_fill", "adapter": "Meta",
                                                                 "position": 2, "latencyMs": 0]))
        #expect(result.result == .failed && result.errorCode == .mediationNoFill && result.adapter == "Meta" && result.position == 2)
        #expect(try accepted(loadEvent("mediation_result", ["result": "timeout", "adapter": "Meta", "position": 100])).position == 100)
        let loaded = try accepted(event(["type": "ad_loaded", "loadId": "load-1", "latencyMs": 600_000]))
        #expect(loaded.loadId == "load-1" && loaded.latencyMs == 600_000 && loaded.requestId == "req-7f3c")
    }

    @Test func aLoadsEventMustNotSetARequestId() throws {
        let message = try rejection(loadEvent("ad_request", ["requestId": "req-1"]))
        #expect(message.contains("requestId must be absent for ad_request"))
    }

    @Test func aLoadsEventNeedsItsLoadId() throws {
        for type in ["ad_request", "ad_failed", "mediation_result"] {
            #expect(try rejection(loadEvent(type, ["loadId": Absent()])).contains("loadId is required"), "\(type)")
        }
        #expect(try rejection(loadEvent("ad_request", ["loadId": ""])).contains("loadId must not be empty"))
        #expect(try rejection(loadEvent("ad_request", ["loadId": String(repeating: "l", count: 129)])).contains("loadId must be at most 128"))
    }

    @Test func everyErrorCodeOfTheSDKIsAcceptedAndNothingElse() throws {
        for code in AdErrorCode.allCases {
            #expect(try accepted(loadEvent("ad_failed", ["errorCode": code.rawValue])).errorCode == code)
        }
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": "NO_FILL"])).contains("errorCode must be one of no_fill"))
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": 1])).contains("errorCode must be a string"))
        #expect(try rejection(loadEvent("ad_failed")).contains("errorCode is required"))
        #expect(try rejection(loadEvent("mediation_result", ["result": "failed", "adapter": "Meta", "position": 1]))
            .contains("errorCode is required"))
    }

    @Test func aMediationResultNeedsItsResultAdapterAndPosition() throws {
        let base: [String: Any] = ["result": "loaded", "adapter": "Meta", "position": 1]
        #expect(try rejection(loadEvent("mediation_result", base.merging(["position": Absent()]) { $1 })).contains("position is required"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["adapter": Absent()]) { $1 })).contains("adapter is required"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["adapter": ""]) { $1 })).contains("adapter must not be empty"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["result": Absent()]) { $1 })).contains("result is required"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["result": "won"]) { $1 }))
            .contains("result must be one of loaded, failed, timeout"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["position": 0]) { $1 }))
            .contains("position must be an integer from 1 to 100, got 0"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["position": 101]) { $1 })).contains("position must be an integer"))
        #expect(try rejection(loadEvent("mediation_result", base.merging(["position": "1"]) { $1 })).contains("position must be an integer from 1 to 100, got"))
    }

    @Test func numbersMustBeIntegersInTheirRanges() throws {
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": "timeout", "latencyMs": 600_001]))
            .contains("latencyMs must be an integer from 0 to 600000, got 600001"))
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": "timeout", "latencyMs": -1])).contains("latencyMs must be an integer"))
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": "timeout", "latencyMs": 1.5])).contains("got 1.5"))
        #expect(try rejection(loadEvent("ad_request", ["adsRequested": 0])).contains("adsRequested must be an integer from 1 to 5"))
        #expect(try rejection(loadEvent("ad_request", ["adsRequested": 6])).contains("adsRequested must be an integer from 1 to 5"))
    }

    @Test func aFieldOnATypeItDoesNotBelongToIsRefusedNamingIt() throws {
        #expect(try rejection(event(["loadId": "load-1"])).contains("loadId is a field of ad_request, ad_failed, mediation_result, ad_loaded events only, not of impression"))
        #expect(try rejection(event(["latencyMs": 10])).contains("latencyMs is a field of"))
        #expect(try rejection(event(["type": "click", "assetKey": "MainImage", "errorCode": "no_fill"])).contains("errorCode is a field of"))
        #expect(try rejection(event(["position": 1])).contains("position is a field of"))
        #expect(try rejection(event(["type": "ad_loaded", "adsRequested": 2])).contains("adsRequested is a field of ad_request events only"))
        #expect(try rejection(loadEvent("ad_request", ["result": "loaded"])).contains("result is a field of mediation_result events only"))
        #expect(try rejection(loadEvent("ad_request", ["latencyMs": 5])).contains("latencyMs is a field of"))
    }

    @Test func aLoadHasNoAdToClick() throws {
        #expect(try rejection(loadEvent("ad_request", ["assetKey": "MainImage"]))
            .contains("assetKey is a field of an ad's events, not of ad_request"))
        #expect(try rejection(loadEvent("ad_failed", ["errorCode": "no_fill", "clickAction": "deep_link"]))
            .contains("clickAction is a field of an ad's events, not of ad_failed"))
        // One message for the field, not a second about its value.
        let message = try rejection(loadEvent("mediation_result", ["result": "loaded", "adapter": "Meta", "position": 1, "assetKey": ""]))
        #expect(message.contains("assetKey is a field of an ad's events, not of mediation_result"))
        #expect(!message.contains("must not be empty"))
        // An ad's own events keep them.
        #expect(try decode(body([event(["type": "ad_loaded", "assetKey": "MainImage", "clickAction": "deep_link"])])).accepted.count == 1)
    }

    @Test func aBadLoadEventCostsTheRestOfTheBatchNothing() throws {
        let batch = try decode(body([loadEvent("ad_failed", ["errorCode": "bogus"]),
                                     event(["id": "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b12"]),
                                     loadEvent("ad_request", ["id": "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b13"])]))
        #expect(batch.accepted.count == 2)
        #expect(batch.rejected.map(\.index) == [0])
        #expect(batch.rejected.first?.error.contains("errorCode") == true)
    }
}

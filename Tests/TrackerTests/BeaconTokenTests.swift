import Foundation
import Testing
@testable import Tracker

private let secret = "0123456789abcdef0123456789abcdef"
private let secrets = try! BeaconSecrets(current: secret)
/// 2026-11-20T10:00:05Z, well before the claims below expire.
private let now = Timestamp(rfc3339: "2026-11-20T10:00:05Z")!

private func clickEvent(_ extra: [(key: String, value: JSONValue)] = []) -> JSONValue {
    .object([("id", .string("0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11")), ("type", .string("click")),
             ("requestId", .string("req-7f3c")), ("adUnit", .string("/6499/site/native")),
             ("formatId", .string("10063170")), ("assetKey", .string("MainImage"))] + extra)
}

private let claims = BeaconClaims(event: clickEvent(), destination: "https://advertiser.example/landing?x=1",
                                  expiresAt: 1_795_000_000, issuer: "cli")

/// The token's payload as text, and the token with `edit` applied to that text, signature kept.
private func payload(_ token: String) -> String {
    String(decoding: Base64URL.decode(token.split(separator: ".")[0])!, as: UTF8.self)
}

private func tampered(_ token: String, _ edit: (String) -> String) -> String {
    let signature = token.split(separator: ".")[1]
    let changed = edit(payload(token))
    #expect(changed != payload(token), "the edit changes the payload")
    return Base64URL.encode(Array(changed.utf8)) + "." + signature
}

private func order(_ event: JSONValue = clickEvent(), destination: String? = "https://advertiser.example/landing",
                   expiresIn: Int64? = nil) -> BeaconOrder {
    BeaconOrder(event: event, destination: destination, expiresInSeconds: expiresIn)
}

private func mintError(_ o: BeaconOrder) -> String? {
    do {
        _ = try Beacons(secrets: secrets).mint(o, issuer: "cli", now: now)
        return nil
    } catch {
        return error.description
    }
}

@Suite struct Base64URLTests {
    @Test func encodesTheRFC4648VectorsWithoutPadding() {
        let vectors = ["": "", "f": "Zg", "fo": "Zm8", "foo": "Zm9v", "foob": "Zm9vYg", "fooba": "Zm9vYmE", "foobar": "Zm9vYmFy"]
        for (plain, encoded) in vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_", "the URL alphabet: - and _ instead of + and /")
    }

    @Test func roundTripsEveryLengthAndByte() {
        var rng = SystemRandomNumberGenerator()
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test func refusesPaddingOtherAlphabetsImpossibleLengthsAndSecondSpellings() {
        for text in ["Zg==", "Zm9v+", "Zm9v/", "Z", "Zm9vY", "Zh", "Zm9"] {
            #expect(Base64URL.decode(text) == nil, "\(text)")
        }
    }
}

@Suite struct BeaconTokenTests {
    @Test func theTokenIsHMACSHA256OverTheBase64URLClaimsAsDocumented() throws {
        // Computed independently (Python's hmac module), as docs/CLIENT.md describes the format:
        // base64url(claims JSON) "." base64url(HMAC-SHA256(secret, "tracker-beacon-v1:" + payload)).
        let expected = "eyJ2IjoxLCJpc3MiOiJjbGkiLCJleHAiOjE3OTUwMDAwMDAsImRlc3QiOiJodHRwczovL2FkdmVydGlzZXIuZXhhbXBsZS9sYW5kaW5nP3g9MSIsImV2ZW50Ijp7ImlkIjoiMDE5MmYzYTQtN2IxYy03YzNlLTlhMTAtNWYyZDhlMGM0YjExIiwidHlwZSI6ImNsaWNrIiwicmVxdWVzdElkIjoicmVxLTdmM2MiLCJhZFVuaXQiOiIvNjQ5OS9zaXRlL25hdGl2ZSIsImZvcm1hdElkIjoiMTAwNjMxNzAiLCJhc3NldEtleSI6Ik1haW5JbWFnZSJ9fQ.NcsgnruDvceOpqVG0kFpdImvwfecw372ha6lecHdtNU"
        #expect(BeaconToken.sign(claims, with: secrets) == expected)
        #expect(try BeaconToken.verify(expected, with: secrets) == claims)
    }

    @Test func changingAnySignedFieldBreaksTheSignature() throws {
        let token = BeaconToken.sign(claims, with: secrets)
        let edits: [(String, String)] = [
            ("0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11", "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b12"),  // event id
            ("\"click\"", "\"adchoices_click\""),  // type
            ("req-7f3c", "req-7f3d"),  // request id
            ("/6499/site/native", "/6499/site/native2"),  // ad unit
            ("10063170", "10063171"),  // format
            ("MainImage", "Headline"),  // asset key
            ("advertiser.example", "attacker.example"),  // destination
            ("1795000000", "1895000000"),  // expiry
            ("\"iss\":\"cli\"", "\"iss\":\"app\""),  // issuer
            ("\"assetKey\":\"MainImage\"", "\"assetKey\":\"MainImage\",\"eea\":true"),  // a flag added
            ("\"assetKey\":\"MainImage\"", "\"assetKey\":\"MainImage\",\"test\":true"),
            ("\"assetKey\":\"MainImage\"", "\"assetKey\":\"MainImage\",\"source\":\"sdk\""),
        ]
        for (from, to) in edits {
            let forged = tampered(token) { $0.replacingOccurrences(of: from, with: to) }
            #expect(throws: BeaconTokenError.badSignature, "changed \(from) to \(to)") {
                try BeaconToken.verify(forged, with: secrets)
            }
        }
        let flipped = String(token.dropLast()) + (token.last == "A" ? "B" : "A")
        #expect(throws: BeaconTokenError.badSignature) { try BeaconToken.verify(flipped, with: secrets) }
    }

    @Test func anotherSecretsTokenIsRefused() throws {
        let other = try BeaconSecrets(current: String(repeating: "z", count: 32))
        #expect(throws: BeaconTokenError.badSignature) {
            try BeaconToken.verify(BeaconToken.sign(claims, with: other), with: secrets)
        }
    }

    @Test func aRotationSignsWithTheNewSecretAndStillAcceptsThePreviousOne() throws {
        let next = String(repeating: "n", count: 40)
        let rotated = try BeaconSecrets(current: next, previous: secret)
        let old = BeaconToken.sign(claims, with: secrets)
        #expect(try BeaconToken.verify(old, with: rotated) == claims, "URLs already on pages keep working")
        let fresh = BeaconToken.sign(claims, with: rotated)
        #expect(fresh != old)
        #expect(try BeaconToken.verify(fresh, with: try BeaconSecrets(current: next)) == claims)
        #expect(throws: BeaconTokenError.badSignature, "once the previous secret is dropped, its tokens stop") {
            try BeaconToken.verify(old, with: try BeaconSecrets(current: next))
        }
    }

    @Test func secretsShorterThan32BytesAreRefused() {
        #expect(throws: BeaconSecretError.tooShort(variable: "TRACKER_BEACON_SECRET", bytes: 31)) {
            try BeaconSecrets(current: String(repeating: "a", count: 31))
        }
        #expect(throws: BeaconSecretError.tooShort(variable: "TRACKER_BEACON_PREVIOUS_SECRET", bytes: 3)) {
            try BeaconSecrets(current: secret, previous: "old")
        }
    }

    @Test func malformedTokensAreRefusedWithoutASignatureCheck() {
        #expect(throws: BeaconTokenError.missing) { try BeaconToken.verify("", with: secrets) }
        for token in ["abc", "a.b.c", "!!.AAAA", "eyJ2IjoxfQ", String(repeating: "A", count: 5000) + ".A"] {
            #expect(performing: { try BeaconToken.verify(token, with: secrets) }, throws: { error in
                if case BeaconTokenError.malformed = error { return true }
                return false
            })
        }
    }
}

@Suite struct BeaconMintingTests {
    @Test func aMintedClickCarriesItsDestinationAndANewUUIDv7WhenNoIdIsGiven() throws {
        var event = clickEvent()
        if case .object(let members) = event { event = .object(members.filter { $0.key != "id" }) }
        let beacon = try Beacons(secrets: secrets).mint(order(event), issuer: "ads-1", now: now)
        #expect(beacon.type == .click)
        #expect(beacon.path == "/v1/click?t=" + beacon.token)
        #expect(Array(beacon.id.text)[14] == "7", "a version 7 UUID")
        #expect("89ab".contains(Array(beacon.id.text)[19]), "RFC 9562's variant (bits 10): \(beacon.id.text)")
        #expect(beacon.id.text.hasPrefix("01a1f866-2088-7"), "its first 48 bits are the minting time in ms: \(beacon.id.text)")
        #expect(beacon.expiresAt == now + .seconds(86_400), "a day by default")
        let claims = try BeaconToken.verify(beacon.token, with: secrets)
        #expect(claims.destination == "https://advertiser.example/landing")
        #expect(claims.issuer == "ads-1")
    }

    @Test func anImpressionIsAPixelAndTakesNoDestination() throws {
        let impression = JSONValue.object([("type", .string("impression")), ("requestId", .string("r")),
                                           ("adUnit", .string("/1/a")), ("formatId", .string("native"))])
        let beacon = try Beacons(secrets: secrets).mint(order(impression, destination: nil), issuer: "cli", now: now)
        #expect(beacon.path.hasPrefix("/v1/pixel.gif?t="))
        #expect(mintError(order(impression)) == "destination is only for click and adchoices_click beacons; a impression beacon is a pixel")
    }

    @Test func theEventIsCheckedByTheRulesOfIngestion() {
        let noAsset = JSONValue.object([("type", .string("click")), ("requestId", .string("r")),
                                        ("adUnit", .string("6499")), ("formatId", .string("x"))])
        let message = mintError(order(noAsset)) ?? ""
        #expect(message.hasPrefix("event is not a valid event: "))
        for rule in ["adUnit must be '/'", "formatId must be a custom native format ID", "assetKey is required for click"] {
            #expect(message.contains(rule), "\(rule) in \(message)")
        }
        #expect(mintError(order(clickEvent([("occurredAt", .string("2026-11-20T10:00:00Z"))])))
                == "event.occurredAt must not be set: a beacon's time is when the browser fetches it (the server's receive time)")
    }

    @Test func aClickNeedsAnAbsoluteHTTPDestination() {
        #expect(mintError(order(destination: nil))?.hasPrefix("destination is required for a click beacon") == true)
        for bad in ["javascript:alert(1)", "//evil.example/", "ftp://files.example/x", "https://", "https://a.example/with space",
                    "https://a.example/\r\nSet-Cookie: x=1", "https:\\\\evil.example", "/relative/path"] {
            #expect(mintError(order(destination: bad))?.hasPrefix("destination must") == true, "\(bad)")
        }
        #expect(mintError(order(destination: "HTTPS://Advertiser.example:8443/p?q=1#f")) == nil)
    }

    @Test func expiresInIsBetweenOneSecondAndThirtyDays() {
        #expect(mintError(order(expiresIn: 0)) == "expiresIn must be 1 to 2592000 seconds (30 days), got 0")
        #expect(mintError(order(expiresIn: 2_592_001)) != nil)
        #expect(mintError(order(expiresIn: 2_592_000)) == nil)
    }

    @Test func aRequestBodysFaultNamesTheBeaconsIndex() {
        let body = #"{"beacons":[{"event":{"type":"impression","requestId":"r","adUnit":"/1/a","formatId":"native"}},{"event":{"type":"impression","requestId":"r","adUnit":"/1/a","formatId":"native"},"expiresIn":"soon"}]}"#
        #expect(throws: BeaconOrderError(field: "beacons[1].expiresIn", rule: "must be a number of seconds, got a string")) {
            try Beacons(secrets: secrets).mint(requestBody: Array(body.utf8), issuer: "cli", now: now)
        }
    }
}

@Suite struct BeaconReceivingTests {
    let beacons = Beacons(secrets: secrets)

    @Test func anAuthenticClickBecomesAnEventTimedWhenTheBrowserFetchedIt() throws {
        let token = try beacons.mint(order(), issuer: "ads-1", now: now).token
        let fetched = now + .seconds(30)
        let visit = try beacons.receive(token, at: .click, receivedAt: fetched)
        #expect(visit.destination == "https://advertiser.example/landing")
        #expect(visit.keyName == "beacon:ads-1")
        guard case .record(let event) = visit.outcome else { Issue.record("not recorded: \(visit.outcome)"); return }
        #expect(event.id.text == "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11")
        #expect(event.assetKey == "MainImage")
        #expect(event.occurredAt == fetched && event.receivedAt == fetched && event.correctedAt == fetched)
        #expect(event.sentAt == nil)
    }

    @Test func anExpiredClickIsARejectionThatStillKnowsItsDestination() throws {
        let token = try beacons.mint(order(expiresIn: 60), issuer: "cli", now: now).token
        let visit = try beacons.receive(token, at: .click, receivedAt: now + .seconds(61))
        #expect(visit.destination == "https://advertiser.example/landing")
        guard case .reject(let rejection) = visit.outcome else { Issue.record("recorded an expired click"); return }
        #expect(rejection.reason == .expired)
        #expect(rejection.eventId == "0192f3a4-7b1c-7c3e-9a10-5f2d8e0c4b11")
        #expect(rejection.message.hasPrefix("the beacon expired at 2026-11-20T10:01:05.000000Z, 1 s before it was received"))
        let onTheSecond = try beacons.receive(token, at: .click, receivedAt: now + .seconds(60))
        if case .reject = onTheSecond.outcome { Issue.record("valid up to and including its expiry second") }
    }

    @Test func anAuthenticEventThatBreaksARuleNowIsARejectionWithTheValidatorsMessage() throws {
        // As if signed by an older tracker whose rules allowed it: the ad unit lacks a segment.
        let old = BeaconClaims(event: clickEvent([("adUnit", .string("/6499"))]), destination: "https://advertiser.example/",
                               expiresAt: now.microseconds / 1_000_000 + 60, issuer: "cli")
        let visit = try beacons.receive(BeaconToken.sign(old, with: secrets), at: .click, receivedAt: now)
        #expect(visit.destination == "https://advertiser.example/", "the click still knows where to go")
        guard case .reject(let rejection) = visit.outcome else { Issue.record("recorded an invalid event"); return }
        #expect(rejection.reason == .invalid)
        #expect(rejection.message.hasPrefix("adUnit must be '/' + the network code"), "\(rejection.message)")
    }

    @Test func aTokenOnTheOtherEndpointIsRefused() throws {
        let click = try beacons.mint(order(), issuer: "cli", now: now).token
        #expect(throws: BeaconTokenError.wrongEndpoint("this token is for a click event: use /v1/click")) {
            try beacons.receive(click, at: .pixel, receivedAt: now)
        }
    }
}

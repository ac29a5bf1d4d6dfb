import Testing
@testable import TrackerInput

/// The suites of PROTOCOL.md 8's pure parts (addresses, ranges, the user-agent matcher, rule sets,
/// X-Forwarded-For), grouped so that `swift test --filter InvalidTraffic` runs them all.
enum InvalidTraffic {}

private func address(_ text: String) throws -> IPAddress {
    try #require(IPAddress(text), "\(text) should parse")
}

extension InvalidTraffic {
    @Suite struct IPAddressParsing {
        @Test func dottedQuadIsAnIPv4Address() throws {
            let a = try address("192.0.2.1")
            #expect(a.family == .v4)
            #expect(a.bytes == [192, 0, 2, 1])
            #expect(a.description == "192.0.2.1")
            #expect(try address("0.0.0.0").description == "0.0.0.0")
            #expect(try address("255.255.255.255").bytes == [255, 255, 255, 255])
        }

        @Test func ipv4FormsOtherThanFourDecimalPartsAreRefused() {
            for text in ["01.2.3.4", "1.2.3.04", "00.0.0.0", "256.0.0.1", "1.2.3", "1.2.3.4.5", "127.1", "2130706433",
                         "1.2.3.", ".1.2.3", "1..2.3", "1.2.3.4 ", " 1.2.3.4", "1.2.3.4/32", "0x7f.0.0.1", "1.2.3.-4", "", "1111.2.3.4"] {
                #expect(IPAddress(text) == nil, "\(text) should be refused")
            }
        }

        @Test func ipv6IsWrittenCanonicallyAsRFC5952Says() throws {
            let cases: [(String, String)] = [
                ("2001:0DB8:0000:0000:0000:0000:0000:0001", "2001:db8::1"),
                ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),  // the first of two equal runs
                ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),  // one zero group is not shortened
                ("2001:db8::", "2001:db8::"),
                ("::", "::"),
                ("::1", "::1"),
                ("1::", "1::"),
                ("0:0:0:0:0:0:0:1", "::1"),
                ("fe80:0:0:0:0:0:0:0", "fe80::"),
                ("2001:db8:0:0:0:1:0:0", "2001:db8::1:0:0"),
                ("2001:db8:1:0:0:0:0:0", "2001:db8:1::"),
                ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
                ("1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:0"),
                ("::2:3:4:5:6:7:8", "0:2:3:4:5:6:7:8"),
                ("64:ff9b::192.0.2.33", "64:ff9b::c000:221"),
                ("::192.0.2.33", "::c000:221"),
                ("1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304"),
            ]
            for (text, canonical) in cases {
                let a = try address(text)
                #expect(a.family == .v6, "\(text)")
                #expect(a.description == canonical, "\(text)")
                #expect(IPAddress(canonical) == a, "\(canonical) reads back as \(text)")
            }
        }

        @Test func ipv6BytesAreInNetworkOrder() throws {
            let a = try address("2001:db8::ff00:42:8329")
            #expect(a.bytes == [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0xff, 0x00, 0x00, 0x42, 0x83, 0x29])
            #expect(IPAddress(bytes: a.bytes) == a)
            #expect(IPAddress(bytes: [10, 0, 0, 1]) == IPAddress("10.0.0.1"))
            #expect(IPAddress(bytes: [1, 2, 3]) == nil)
        }

        @Test func anIPv4MappedAddressIsTheIPv4Address() throws {
            for text in ["::ffff:192.0.2.1", "::FFFF:192.0.2.1", "0:0:0:0:0:ffff:c000:201", "::ffff:c000:0201"] {
                let a = try address(text)
                #expect(a == IPAddress("192.0.2.1"), "\(text)")
                #expect(a.family == .v4)
                #expect(a.description == "192.0.2.1")
            }
            let mappedBytes: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]
            #expect(IPAddress(bytes: mappedBytes) == IPAddress("192.0.2.1"))
            // Only ::ffff:0:0/96 is folded; the IPv4-compatible and NAT64 forms stay IPv6.
            #expect(try address("::192.0.2.1").family == .v6)
            #expect(try address("::fffe:192.0.2.1").family == .v6)
            #expect(try address("1::ffff:192.0.2.1").family == .v6)
        }

        @Test func zonesBracketsPortsAndBrokenIPv6AreRefused() {
            for text in ["fe80::1%eth0", "[::1]", "[::1]:80", "::1/128", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", ":::", "1:::2",
                         "1::2::3", ":1:2:3:4:5:6:7", "1:2:3:4:5:6:7:", "12345::", "g::1", "::ffff:1.2.3", "::ffff:01.2.3.4",
                         "1:2:3:4:5:6:7:1.2.3.4", "::1.2.3.4:5", "1.2.3.4::", ": :", "::ffff:256.1.1.1",
                         "1:2:3:4:5:6:7:8::", "::1:2:3:4:5:6:7:8", "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255:0"] {
                #expect(IPAddress(text) == nil, "\(text) should be refused")
            }
        }

        @Test func aLongTextIsRefusedWithoutReadingItWhole() {
            #expect(IPAddress(String(repeating: "1", count: 100_000)) == nil)
            #expect(IPAddress("0000:0000:0000:0000:0000:0000:0000:0000") == IPAddress("::"))
        }

        @Test func everyAddressReadsBackFromItsCanonicalText() {
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<2_000 {
                let v6 = Bool.random(using: &generator)
                let bytes = (0..<(v6 ? 16 : 4)).map { _ -> UInt8 in
                    // Many zero bytes, so that runs of zero groups come up.
                    Bool.random(using: &generator) ? 0 : UInt8.random(in: 0...255, using: &generator)
                }
                guard let a = IPAddress(bytes: bytes) else { Issue.record("\(bytes)"); continue }
                #expect(IPAddress(a.description) == a, "\(a)")
                #expect(IPAddress(bytes: a.bytes) == a)
            }
        }
    }

    @Suite struct IPAddressTruncation {
        @Test func anIPv4AddressTruncatesToIts24() throws {
            #expect(try address("192.0.2.77").truncated() == IPAddress("192.0.2.0"))
            #expect(try address("192.0.2.0").truncated() == IPAddress("192.0.2.0"))
            #expect(try address("255.255.255.255").truncated().description == "255.255.255.0")
            #expect(try address("::ffff:10.1.2.3").truncated() == IPAddress("10.1.2.0"))
        }

        @Test func anIPv6AddressTruncatesToIts48() throws {
            #expect(try address("2001:db8:1:2::5").truncated().description == "2001:db8:1::")
            #expect(try address("2001:db8:abcd:ffff:ffff:ffff:ffff:ffff").truncated().description == "2001:db8:abcd::")
            #expect(try address("::1").truncated().description == "::")
            let t = try address("2001:db8:1:2::5").truncated()
            #expect(t.truncated() == t)
        }
    }
}

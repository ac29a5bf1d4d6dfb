import Testing
@testable import TrackerInput

private func range(_ text: String) throws -> CIDRRange {
    try #require(CIDRRange(text), "\(text) should parse")
}

private func ip(_ text: String) -> IPAddress {
    IPAddress(text)!
}

extension InvalidTraffic {
    @Suite struct CIDRRangeParsing {
        @Test func hostBitsAreMaskedOff() throws {
            #expect(try range("10.1.2.3/8").description == "10.0.0.0/8")
            #expect(try range("10.1.2.3/8") == range("10.0.0.0/8"))
            #expect(try range("192.0.2.255/25").description == "192.0.2.128/25")
            #expect(try range("2001:db8:ffff::1/32").description == "2001:db8::/32")
            #expect(try range("2001:db8::1/127").description == "2001:db8::/127")
            #expect(try range("1.2.3.4/0").description == "0.0.0.0/0")
            #expect(try range("ffff::1/0").description == "::/0")
            #expect(try range("2600:1900::/28").description == "2600:1900::/28")
        }

        @Test func aBareAddressIsTheRangeOfThatOneAddress() throws {
            #expect(try range("192.0.2.7") == range("192.0.2.7/32"))
            #expect(try range("2001:db8::7").description == "2001:db8::7/128")
        }

        @Test func anIPv4MappedRangeIsTheIPv4Range() throws {
            #expect(try range("::ffff:10.0.0.0/104").description == "10.0.0.0/8")
            #expect(try range("::ffff:192.0.2.1").description == "192.0.2.1/32")
            #expect(try range("::ffff:0:0/96").description == "0.0.0.0/0")
            // Wider than the mapped block: an IPv6 range, which holds no IPv4 address.
            let wide = try range("::ffff:0:0/80")
            #expect(wide.network.family == .v6)
            #expect(!wide.contains(ip("10.0.0.1")))
        }

        @Test func aBadRangeSaysWhatIsWrong() throws {
            func problem(_ text: String) -> String {
                do {
                    _ = try CIDRRange.parse(text)
                    return "accepted"
                } catch {
                    return error.description
                }
            }
            #expect(problem("10.0.0.0/33") == #""10.0.0.0/33" is not a CIDR range (prefix 0...32 for IPv4)"#)
            #expect(problem("2001:db8::/129") == #""2001:db8::/129" is not a CIDR range (prefix 0...128 for IPv6)"#)
            #expect(problem("::ffff:1.2.3.4/129") == #""::ffff:1.2.3.4/129" is not a CIDR range (prefix 0...128 for IPv6)"#)
            #expect(problem("10.0.0/8") == #""10.0.0/8" is not a CIDR range (an IPv4 or IPv6 address, optionally followed by /prefix)"#)
            for text in ["10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "10.0.0.0/ 8", "10.0.0.0/1000", "10.0.0.0/+8", " 10.0.0.0/8", "", "/8", "x"] {
                #expect(CIDRRange(text) == nil, "\(text) should be refused")
            }
        }

        @Test func aRangeHoldsItsFirstAndLastAddressAndNothingOutside() throws {
            let r = try range("192.0.2.0/24")
            #expect(r.contains(ip("192.0.2.0")))
            #expect(r.contains(ip("192.0.2.255")))
            #expect(!r.contains(ip("192.0.1.255")))
            #expect(!r.contains(ip("192.0.3.0")))
            #expect(!r.contains(ip("::ffff:c000:300")))
            #expect(r.contains(ip("::ffff:c000:2ff")))
            let v6 = try range("2001:db8::/32")
            #expect(v6.contains(ip("2001:db8::")))
            #expect(v6.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")))
            #expect(!v6.contains(ip("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff")))
            #expect(!v6.contains(ip("2001:db9::")))
            #expect(!v6.contains(ip("32.1.13.184")))  // the same leading bits, another family
        }
    }

    @Suite struct IPRangeSetLookup {
        @Test func membershipAtTheEdgesOfEveryRange() throws {
            let set = IPRangeSet(try ["34.64.0.0/10", "192.0.2.7", "2600:1900::/28", "::/128", "255.255.255.0/24"].map(range))
            for inside in ["34.64.0.0", "34.127.255.255", "192.0.2.7", "2600:1900::", "2600:190f:ffff:ffff:ffff:ffff:ffff:ffff", "::",
                           "255.255.255.255", "255.255.255.0"] {
                #expect(set.contains(ip(inside)), "\(inside)")
            }
            for outside in ["34.63.255.255", "34.128.0.0", "192.0.2.6", "192.0.2.8", "2600:18ff:ffff:ffff:ffff:ffff:ffff:ffff",
                            "2600:1910::", "::1", "0.0.0.0", "255.255.254.255"] {
                #expect(!set.contains(ip(outside)), "\(outside)")
            }
        }

        @Test func overlappingAndAdjacentRangesMergeIntoOneInterval() throws {
            let set = IPRangeSet(try ["10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.0.2.0/23", "10.0.5.0/24", "0.0.0.0/0",
                                      "::/0", "2001:db8::/32", "::1"].map(range))
            #expect(set.intervalCount == 2)
            #expect(set.contains(ip("10.0.3.255")))
            #expect(set.contains(ip("255.255.255.255")))
            let apart = IPRangeSet(try ["10.0.0.0/24", "10.0.1.0/24", "10.0.3.0/24"].map(range))
            #expect(apart.intervalCount == 2)
            #expect(!apart.contains(ip("10.0.2.0")))
            #expect(IPRangeSet.empty.isEmpty)
            #expect(!IPRangeSet.empty.contains(ip("10.0.0.1")))
        }

        @Test func tenThousandRandomRangesAgreeWithALinearScan() throws {
            var rng = SplitMix64(seed: 20_261_125)
            var ranges: [CIDRRange] = []
            for _ in 0..<10_000 {
                if rng.next() % 2 == 0 {
                    let prefix = Int(8 + rng.next() % 25)
                    ranges.append(CIDRRange(address: IPAddress(ipv4: UInt32(truncatingIfNeeded: rng.next())), prefixLength: prefix)!)
                } else {
                    // A small part of the space, so that ranges overlap and nest.
                    let high = 0x2001_0db8_0000_0000 | (rng.next() & 0xFFFF_FFFF)
                    let prefix = Int(32 + rng.next() % 97)
                    ranges.append(CIDRRange(address: IPAddress(ipv6High: high, low: rng.next()), prefixLength: prefix)!)
                }
            }
            let set = IPRangeSet(ranges)
            var probes: [IPAddress] = []
            for r in ranges.prefix(1_000) {
                // Each range's first and last address and their neighbours, and a random address.
                let (first, last) = r.bounds
                for key in [first, last] {
                    for delta: Int64 in [-1, 0, 1] {
                        var k = key
                        if delta == 1, let s = k.successor { k = s }
                        if delta == -1 { k = k.low == 0 ? UInt128Key(high: k.high &- 1, low: .max) : UInt128Key(high: k.high, low: k.low - 1) }
                        probes.append(r.network.family == .v4 ? IPAddress(ipv4: UInt32(truncatingIfNeeded: k.low)) : IPAddress(ipv6High: k.high, low: k.low))
                    }
                }
                probes.append(IPAddress(ipv4: UInt32(truncatingIfNeeded: rng.next())))
                probes.append(IPAddress(ipv6High: 0x2001_0db8_0000_0000 | (rng.next() & 0xFFFF_FFFF), low: rng.next()))
            }
            var inside = 0
            for probe in probes {
                let expected = ranges.contains { $0.contains(probe) }
                #expect(set.contains(probe) == expected, "\(probe)")
                if expected { inside += 1 }
            }
            #expect(inside > 500 && inside < probes.count)
        }
    }
}

/// A small seeded generator, so a failing case replays.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

import Testing
@testable import TrackerInput

private func ip(_ text: String) -> IPAddress {
    IPAddress(text)!
}

/// HAProxy and a load balancer in front of the tracker: 10.0.0.0/8 and 2001:db8:ffff::/48.
private let proxies = try! ForwardedFor.trustedProxies("10.0.0.0/8, 2001:db8:ffff::/48")

private func client(peer: String, _ header: String?) -> String {
    ForwardedFor.client(peer: ip(peer), header: header, trustedProxies: proxies).description
}

extension InvalidTraffic {
    @Suite struct ForwardedForClient {
        @Test func theHeaderIsReadOnlyFromATrustedPeer() {
            #expect(client(peer: "203.0.113.9", "198.51.100.7") == "203.0.113.9")
            #expect(client(peer: "10.0.0.2", "198.51.100.7") == "198.51.100.7")
            #expect(ForwardedFor.client(peer: ip("10.0.0.2"), header: "198.51.100.7", trustedProxies: .empty).description == "10.0.0.2")
        }

        @Test func anAbsentOrBlankHeaderLeavesThePeer() {
            #expect(client(peer: "10.0.0.2", nil) == "10.0.0.2")
            #expect(client(peer: "10.0.0.2", "") == "10.0.0.2")
            #expect(client(peer: "10.0.0.2", " , ,\t") == "10.0.0.2")
        }

        @Test func theClientIsTheRightMostUntrustedAddress() {
            // The client wrote "1.1.1.1" itself; the trusted proxies appended the rest.
            #expect(client(peer: "10.0.0.2", "1.1.1.1, 198.51.100.7, 10.0.0.5") == "198.51.100.7")
            #expect(client(peer: "10.0.0.2", "198.51.100.7,10.9.9.9,10.0.0.5") == "198.51.100.7")
            #expect(client(peer: "10.0.0.2", " 198.51.100.7 ,\t10.0.0.5 ") == "198.51.100.7")
            // Several header lines, joined with commas by the caller.
            #expect(client(peer: "10.0.0.2", "6.6.6.6, 198.51.100.7" + "," + "10.0.0.5") == "198.51.100.7")
            #expect(client(peer: "2001:db8:ffff::1", "2001:db8:1::7, 2001:db8:ffff::9") == "2001:db8:1::7")
        }

        @Test func whenEveryEntryIsTrustedTheLeftMostIsTheClient() {
            #expect(client(peer: "10.0.0.2", "10.1.1.1, 10.0.0.5") == "10.1.1.1")
        }

        @Test func anEntryThatIsNoAddressStopsTheWalkAtTheNearestKnownAddress() {
            #expect(client(peer: "10.0.0.2", "198.51.100.7, unknown") == "10.0.0.2")
            #expect(client(peer: "10.0.0.2", "198.51.100.7, unknown, 10.0.0.5") == "10.0.0.5")
            #expect(client(peer: "10.0.0.2", "198.51.100.7, 01.2.3.4") == "10.0.0.2")
            #expect(client(peer: "10.0.0.2", "198.51.100.7, _hidden, 10.0.0.5, 10.0.0.6") == "10.0.0.5")
            #expect(client(peer: "10.0.0.2", "198.51.100.7, fe80::1%eth0") == "10.0.0.2")
        }

        @Test func portsAndBracketsAreDropped() {
            #expect(client(peer: "10.0.0.2", "198.51.100.7:52311") == "198.51.100.7")
            #expect(client(peer: "10.0.0.2", "[2001:db8::7]:443, 10.0.0.5:80") == "2001:db8::7")
            #expect(client(peer: "10.0.0.2", "[2001:db8::7]") == "2001:db8::7")
            // Unbracketed IPv6 is an address, never address and port.
            #expect(client(peer: "10.0.0.2", "2001:db8::7:443") == "2001:db8::7:443")
            for broken in ["198.51.100.7:", "198.51.100.7:65536", "198.51.100.7:x", "[198.51.100.7]", "[2001:db8::7", "[2001:db8::7]x",
                           "[2001:db8::7]:", "198.51.100.7:80:80"] {
                #expect(client(peer: "10.0.0.2", broken) == "10.0.0.2", "\(broken)")
            }
        }

        @Test func anIPv4MappedAddressIsTheIPv4Address() {
            #expect(client(peer: "::ffff:10.0.0.2", "::ffff:198.51.100.7") == "198.51.100.7")
            #expect(client(peer: "10.0.0.2", "198.51.100.7, ::ffff:10.0.0.9") == "198.51.100.7")
        }

        @Test func onlyTheLast64EntriesAndTheLast8KiBAreRead() {
            let trustedHops = (0..<70).map { "10.0.\($0 / 256).\($0 % 256)" }
            // 70 trusted hops: the walk stops at the 64th from the right.
            #expect(client(peer: "10.0.0.2", "198.51.100.7, " + trustedHops.joined(separator: ", ")) == "10.0.0.6")
            // A long left part written by the client does not hide the right part.
            let padding = String(repeating: "1.1.1.1, ", count: 5_000)
            #expect(client(peer: "10.0.0.2", padding + "198.51.100.7, 10.0.0.5") == "198.51.100.7")
            // An entry cut by the 8 KiB window is not read: here the window starts inside
            // "198.51.100.7", at "8.51.100.7", which would read as another address.
            let cut = "198.51.100.7," + String(repeating: " ", count: ForwardedFor.maxHeaderBytes - 19) + "10.0.0.5"
            #expect(client(peer: "10.0.0.2", cut) == "10.0.0.5")
            let blanks = String(repeating: ",", count: 100_000)
            #expect(client(peer: "10.0.0.2", "198.51.100.7" + blanks) == "10.0.0.2")
        }
    }

    @Suite struct TrustedProxiesVariable {
        @Test func rangesAndAddressesSeparatedByCommas() throws {
            let set = try ForwardedFor.trustedProxies(" 10.0.0.0/8 ,192.0.2.7,, 2001:db8::/32,")
            #expect(set.contains(ip("10.255.0.1")))
            #expect(set.contains(ip("192.0.2.7")))
            #expect(!set.contains(ip("192.0.2.8")))
            #expect(set.contains(ip("2001:db8::1")))
            #expect(try ForwardedFor.trustedProxies("").isEmpty)
        }

        @Test func aBadEntryIsNamed() {
            #expect(throws: TrustedProxiesError.self) { try ForwardedFor.trustedProxies("10.0.0.0/8, 10.0.0.0/33") }
            do {
                _ = try ForwardedFor.trustedProxies("10.0.0.0/8, 10.0.0.0/33")
            } catch {
                #expect(error.description == #"TRACKER_TRUSTED_PROXIES entry 1: "10.0.0.0/33" is not a CIDR range (prefix 0...32 for IPv4)"#)
            }
            do {
                _ = try ForwardedFor.trustedProxies("10.0.0.0/8 192.0.2.0/24")
            } catch {
                #expect(error.description.hasPrefix(#"TRACKER_TRUSTED_PROXIES entry 0: "10.0.0.0/8 192.0.2.0/24" is not a CIDR range"#))
            }
        }
    }
}

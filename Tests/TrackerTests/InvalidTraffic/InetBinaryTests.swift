import Testing
@testable import Tracker
@testable import TrackerInput

extension InvalidTraffic {
    /// The log keeps a client's address as PostgreSQL's binary `inet`; the projector reads it
    /// back for every event, and the CIDR rules match what it reads.
    @Suite struct InetBinary {
        @Test func everyAddressReadsBackFromItsBinaryInet() throws {
            for text in ["192.0.2.1", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                         "2001:db8:1:2:3:4:5:6", "fe80::1"] {
                let address = try #require(IPAddress(text))
                let read = address.inetBinary.withUnsafeBytes { IPAddress(inetBinary: $0) }
                #expect(read == address, "\(text)")
                #expect(read?.description == address.description)
            }
        }

        @Test func anIPv4MappedInetReadsAsTheIPv4Address() throws {
            let mapped: [UInt8] = [3, 128, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 0, 2, 1]
            let read = mapped.withUnsafeBytes { IPAddress(inetBinary: $0) }
            #expect(read == IPAddress("192.0.2.1"))
        }

        @Test func bytesThatAreNoInetReadAsNoAddress() {
            let broken: [[UInt8]] = [[], [2, 32, 0], [2, 32, 0, 4, 1, 2, 3], [2, 32, 0, 4, 1, 2, 3, 4, 5], [2, 24, 0, 3, 1, 2, 3],
                                     [3, 128, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]]
            for bytes in broken {
                #expect(bytes.withUnsafeBytes { IPAddress(inetBinary: $0) } == nil, "\(bytes)")
            }
        }
    }
}

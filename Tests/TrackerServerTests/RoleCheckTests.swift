import Foundation
import Logging
import ServiceLifecycle
import Testing
import Tracker
import TrackerPostgres
@testable import TrackerServer

/// The role check at start is advisory: a stop must never wait for it.
struct RoleCheckTests {
    /// A database host that takes the connection and never answers holds libpq's connect (as a
    /// DNS server that drops the query does): the server stops at once all the same.
    @Test func aCheckStillConnectingDoesNotHoldTheShutdown() async throws {
        let silent = try SilentListener()
        defer { silent.close() }
        let logger = Logger(label: "role-check-test")
        // connect_timeout in the URL wins over the pool's default of 3 s: the connect would hold for 300 s.
        let pool = ConnectionPool(conninfo: "postgresql://tracker@127.0.0.1:\(silent.port)/tracker?connect_timeout=300",
                                  maxConnections: 1, logger: logger)
        let check = RoleCheck(uses: [.init(role: .ingest, setting: "DATABASE_URL", pool: pool)], warnings: RoleWarnings(), logger: logger)
        let group = ServiceGroup(configuration: .init(services: [check], logger: logger))
        // Timed from the shutdown: how soon the check's connect begins depends on how busy the
        // pool's threads are, which is not what this test is about.
        let took = try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await silent.waitForConnection()
            let started = ContinuousClock.now
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return ContinuousClock.now - started
        }
        // Far below the connect's 300 s, with room for a machine busy with the rest of the suite.
        #expect(took < .seconds(120), "the stop waited \(took) for a connect that could not end before 300 s")
    }
}

/// A loopback TCP port whose connections the kernel completes and nobody ever reads or answers.
private final class SilentListener: Sendable {
    let fd: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let failure = POSIXErrorCode(rawValue: errno) ?? .EIO
            _ = Glibc.close(fd)
            throw POSIXError(failure)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Waits until a client's connection is queued (the check is inside libpq's connect).
    func waitForConnection() async throws {
        for _ in 0..<200 {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 0) == 1 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw POSIXError(.ETIMEDOUT)
    }

    func close() { _ = Glibc.close(fd) }
}

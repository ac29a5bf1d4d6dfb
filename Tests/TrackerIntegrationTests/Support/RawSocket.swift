import Foundation

/// A bare TCP connection to a loopback port, for clients that misbehave on purpose:
/// connections that send nothing, headers a byte at a time, bodies that stop.
final class RawSocket: @unchecked Sendable {
    // @unchecked: `fd` is immutable; each test uses a socket from one task at a time.
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { Glibc.close(fd); throw POSIXError(.ECONNREFUSED) }
    }

    deinit { Glibc.close(fd) }

    /// Sends bytes; false when the server has closed the connection.
    @discardableResult
    func write(_ data: Data) -> Bool {
        data.withUnsafeBytes { buf in
            var sent = 0
            while sent < buf.count {
                let n = Glibc.send(fd, buf.baseAddress! + sent, buf.count - sent, Int32(MSG_NOSIGNAL))
                if n <= 0 { return false }
                sent += n
            }
            return true
        }
    }

    @discardableResult
    func write(_ text: String) -> Bool { write(Data(text.utf8)) }

    /// Everything the server sends until it closes the connection, `timeout` passes
    /// (`closed` says which) or what arrived is `enough`.
    func read(timeout: Duration, until enough: (Data) -> Bool = { _ in false }) -> (data: Data, closed: Bool) {
        let deadline = ContinuousClock.now + timeout
        var received = Data()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return (received, false) }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ms = Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            guard poll(&descriptor, 1, ms) > 0 else { continue }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return (received, true) }
            received.append(contentsOf: chunk[0..<n])
            if enough(received) { return (received, false) }
        }
    }

    /// The status code of the next response on a kept-alive connection (its head is enough).
    func responseStatus(timeout: Duration) -> Int? {
        Self.status(of: read(timeout: timeout) { $0.range(of: Data("\r\n\r\n".utf8)) != nil }.data)
    }

    /// The status code of the response in `data`, if a whole status line arrived.
    static func status(of data: Data) -> Int? {
        let line = String(decoding: data.prefix(64), as: UTF8.self).split(separator: " ")
        return line.count >= 2 ? Int(line[1]) : nil
    }
}

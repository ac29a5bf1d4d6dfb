import Foundation
import Synchronization

/// A minimal blocking HTTP/1.1 client over a loopback socket.
///
/// Tests need exact control of headers and bytes (gzip, wrong content types, oversize
/// bodies), and nothing here should depend on a second HTTP stack.
struct HTTPClient: Sendable {
    struct Response: Sendable {
        var status: Int
        var headers: [String: String]
        var body: Data

        var text: String { String(decoding: body, as: UTF8.self) }
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    }

    let port: Int
    /// How long a read may wait for the server (a request that waits on purpose needs more).
    var readTimeoutSeconds = 30

    init(port: Int) {
        self.port = port
    }

    func request(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) throws -> Response {
        let fd = try send(method, path, headers: headers, body: body)
        return try receive(fd)
    }

    /// Sends the rest of a body begun with `startRequest`, then reads the response; closes `fd`.
    func finishRequest(_ fd: Int32, rest: Data) throws -> Response {
        try rest.withUnsafeBytes { buf in
            var sent = 0
            while sent < buf.count {
                let n = Glibc.send(fd, buf.baseAddress! + sent, buf.count - sent, Int32(MSG_NOSIGNAL))
                if n <= 0 { close(fd); throw POSIXError(.EPIPE) }
                sent += n
            }
        }
        return try receive(fd)
    }

    private func receive(_ fd: Int32) throws -> Response {
        defer { close(fd) }
        var received = Data()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { break }
            received.append(contentsOf: chunk[0..<n])
        }
        return try Self.parse(received)
    }

    /// Sends a request whose body is still coming: the headers promise `declaredLength` bytes
    /// and only `bodyPrefix` is sent. The caller closes the returned socket.
    func startRequest(_ method: String, _ path: String, headers: [String: String], bodyPrefix: Data, declaredLength: Int) throws -> Int32 {
        var headers = headers
        headers["Content-Length"] = String(declaredLength)
        return try send(method, path, headers: headers, body: bodyPrefix)
    }

    private func send(_ method: String, _ path: String, headers: [String: String], body: Data?) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var timeout = timeval(tv_sec: readTimeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { close(fd); throw POSIXError(.ECONNREFUSED) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if let body, headers["Content-Length"] == nil { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        var out = Data(head.utf8)
        if let body { out.append(body) }
        do {
            try out.withUnsafeBytes { buf in
                var sent = 0
                while sent < buf.count {
                    let n = Glibc.send(fd, buf.baseAddress! + sent, buf.count - sent, Int32(MSG_NOSIGNAL))
                    if n <= 0 { throw POSIXError(.EPIPE) }
                    sent += n
                }
            }
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    static func parse(_ data: Data) throws -> Response {
        guard let end = data.range(of: Data("\r\n\r\n".utf8)) else { throw POSIXError(.EBADMSG) }
        let head = String(decoding: data[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = head[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw POSIXError(.EBADMSG) }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Data(data[end.upperBound...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            body = dechunk(body)
        }
        return Response(status: status, headers: headers, body: body)
    }

    static func dechunk(_ data: Data) -> Data {
        var out = Data()
        var rest = data[...]
        while let lineEnd = rest.range(of: Data("\r\n".utf8)) {
            let sizeText = String(decoding: rest[..<lineEnd.lowerBound], as: UTF8.self)
            guard let size = Int(sizeText.split(separator: ";")[0], radix: 16), size > 0 else { break }
            let start = lineEnd.upperBound
            out.append(rest[start..<(start + size)])
            rest = rest[(start + size + 2)...]
        }
        return out
    }
}

/// Runs blocking socket work (`HTTPClient`) on a new thread and waits for it
/// without holding one of the test process's cooperative threads, which the in-process
/// trackers need.
func onThreadOfItsOwn<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}

/// A loopback port nothing listens on now, below the kernel's range of ephemeral ports, never
/// handed out before in this test process.
///
/// Each port is probed with a bind: the private PostgreSQL clusters and other servers the tests
/// start hold ports too. A port is free again once its probe socket closes, and a server takes
/// a second or more to listen, so a port is handed out once per process: else two suites
/// starting servers at once could be given the same one, and a test talk to the other's
/// server. And the port must not come from the ephemeral range: every outgoing connection
/// (this process's in-process trackers connect to PostgreSQL all the time) takes its local
/// port from there, and a server meant for a port such a connection took in between fails
/// with "address in use".
func freeLoopbackPort() -> Int {
    let below = ephemeralPortRangeStart()
    for _ in 0..<1000 {
        let port = Int.random(in: 10_000..<max(below, 10_001))
        guard isFreeLoopbackPort(port) else { continue }
        if handedOutPorts.withLock({ $0.insert(port).inserted }) { return port }
    }
    return Int.random(in: 10_000..<max(below, 10_001))
}

private let handedOutPorts = Mutex<Set<Int>>([])

/// The first port the kernel gives outgoing connections (`ip_local_port_range`; 32768 by default).
private func ephemeralPortRangeStart() -> Int {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    return range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
}

/// Whether a socket can be bound to `port` on 127.0.0.1 now.
private func isFreeLoopbackPort(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = UInt16(port).bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &addr) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
}

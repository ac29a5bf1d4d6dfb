import CTrackerZlib
import Foundation
@testable import TrackerClient

/// A batch as the server would read it: gunzipped and parsed.
struct PostedBatch: Sendable {
    var sentAt: String
    /// The events' ids, in order.
    var ids: [String]
    /// Each event as JSON text, in order.
    var events: [String]
}

/// Stands in for the tracker: every request waits until the test answers it, so a test
/// decides each status in order and sees exactly what was sent.
final class ScriptedServer: IngestTransport {
    private struct State {
        var arrived: [PendingRequest] = []
        var waiters: [CheckedContinuation<PendingRequest, Never>] = []
        var count = 0
    }

    private let state = Locked(State())

    /// Requests posted so far.
    var requestCount: Int { state.withLock { $0.count } }
    /// Requests posted that no test has taken with `next()` yet.
    var waitingCount: Int { state.withLock { $0.arrived.count } }

    func post(_ gzippedBody: [UInt8]) async throws -> IngestResponse {
        let batch = try Self.parse(gunzip(gzippedBody))
        let request = PendingRequest(batch: batch)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                request.attach(continuation)
                let waiter = state.withLock { s -> CheckedContinuation<PendingRequest, Never>? in
                    s.count += 1
                    if !s.waiters.isEmpty { return s.waiters.removeFirst() }
                    s.arrived.append(request)
                    return nil
                }
                waiter?.resume(returning: request)
            }
        } onCancel: {
            request.fail(CancellationError())
        }
    }

    /// The next request, waiting for it if none is there.
    func next() async -> PendingRequest {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { s -> PendingRequest? in
                if !s.arrived.isEmpty { return s.arrived.removeFirst() }
                s.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    static func parse(_ body: [UInt8]) throws -> PostedBatch {
        let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
        let events = object?["events"] as? [[String: Any]] ?? []
        return PostedBatch(
            sentAt: object?["sentAt"] as? String ?? "",
            ids: events.map { $0["id"] as? String ?? "" },
            events: events.map { String(decoding: try! JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]), as: UTF8.self) })
    }
}

/// One request waiting for the test's answer.
final class PendingRequest: Sendable {
    private struct State {
        var continuation: CheckedContinuation<IngestResponse, any Error>?
        /// Set when the request failed (was cancelled) before the continuation was attached.
        var failure: (any Error)?
    }

    let batch: PostedBatch
    private let state = Locked(State())

    init(batch: PostedBatch) {
        self.batch = batch
    }

    func attach(_ c: CheckedContinuation<IngestResponse, any Error>) {
        let failure = state.withLock { s -> (any Error)? in
            if s.failure == nil { s.continuation = c }
            return s.failure
        }
        if let failure { c.resume(throwing: failure) }
    }

    /// `200` with a receipt: every event accepted except `rejected` (index, message).
    func accept(duplicates: Int = 0, rejected: [(index: Int, error: String)] = []) {
        let items = rejected.map { r in
            "{\"index\":\(r.index),\"id\":\"\(batch.ids[r.index])\",\"error\":\"\(r.error)\"}"
        }
        let body = "{\"accepted\":\(batch.ids.count - duplicates - rejected.count),\"duplicates\":\(duplicates),\"rejected\":[\(items.joined(separator: ","))]}"
        answer(200, body: body)
    }

    /// An error answer with the API's JSON body.
    func refuse(_ status: Int, error: String, message: String, retryAfter: String? = nil) {
        answer(status, body: "{\"error\":\"\(error)\",\"message\":\"\(message)\"}", retryAfter: retryAfter)
    }

    func answer(_ status: Int, body: String, retryAfter: String? = nil) {
        let c = state.withLock { s in defer { s.continuation = nil }; return s.continuation }
        c?.resume(returning: IngestResponse(status: status, retryAfter: retryAfter, body: Data(body.utf8)))
    }

    /// No answer: the connection failed.
    func fail(_ error: any Error = URLError(.cannotConnectToHost)) {
        let c = state.withLock { s -> CheckedContinuation<IngestResponse, any Error>? in
            defer { s.continuation = nil }
            if s.continuation == nil { s.failure = error }
            return s.continuation
        }
        c?.resume(throwing: error)
    }
}

/// The inverse of the client's gzip, through zlib's inflate.
func gunzip(_ input: [UInt8]) throws -> [UInt8] {
    var stream = z_stream()
    guard inflateInit2_(&stream, 15 + 16, zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else { throw URLError(.cannotDecodeRawData) }
    defer { inflateEnd(&stream) }
    var output = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    var status: Int32 = Z_OK
    var input = input
    input.withUnsafeMutableBufferPointer { inputBuffer in
        stream.next_in = inputBuffer.baseAddress
        stream.avail_in = uInt(inputBuffer.count)
        repeat {
            chunk.withUnsafeMutableBufferPointer { c in
                stream.next_out = c.baseAddress
                stream.avail_out = uInt(c.count)
                status = inflate(&stream, Z_NO_FLUSH)
            }
            output.append(contentsOf: chunk[0..<(chunk.count - Int(stream.avail_out))])
        } while status == Z_OK
    }
    guard status == Z_STREAM_END else { throw URLError(.cannotDecodeRawData) }
    return output
}

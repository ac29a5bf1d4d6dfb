import CTrackerZlib
import NIOCore

/// gzip request bodies (RFC 1952) through the system's zlib, strictly.
///
/// - Every member is read: a body of several members (what `cat a.gz b.gz` makes, and what a
///   client that compresses in pieces sends) decompresses to their concatenation.
/// - Each member must end with its trailer (CRC-32 and length), which zlib checks: a body cut
///   short anywhere, trailer included, is refused rather than half-read.
/// - Nothing but another member may follow a member.
/// - Output beyond `maxSize` stops the work at once (a small body that inflates a thousandfold
///   costs no more than `maxSize` of memory).
enum Gunzip {
    enum Failure: Error, Equatable {
        /// The decompressed body would pass `maxSize`.
        case tooLarge
        /// Not gzip, corrupt, or cut short; the text says which, for the `400`'s message.
        case invalid(String)
    }

    static func decompress(_ input: ByteBuffer, maxSize: Int) throws(Failure) -> ByteBuffer {
        guard input.readableBytes > 0 else { throw .invalid("the body is empty") }
        var stream = z_stream()
        // windowBits 15 + 16: a gzip header and trailer only (not zlib's, not raw deflate).
        guard inflateInit2_(&stream, 15 + 16, zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw .invalid("zlib could not start an inflate stream")
        }
        defer { inflateEnd(&stream) }

        var output = ByteBuffer()
        output.reserveCapacity(min(maxSize, max(4096, input.readableBytes * 8)))
        let chunk = 64 * 1024
        let outcome: Failure? = input.withUnsafeReadableBytes { raw -> Failure? in
            stream.next_in = UnsafeMutablePointer(mutating: raw.bindMemory(to: UInt8.self).baseAddress)
            stream.avail_in = uInt(raw.count)
            var members = 0
            while true {
                // One byte of room past the limit: output that fills it is over the limit.
                let room = min(chunk, maxSize - output.readableBytes + 1)
                var status: Int32 = Z_OK
                output.writeWithUnsafeMutableBytes(minimumWritableBytes: room) { out -> Int in
                    stream.next_out = out.bindMemory(to: UInt8.self).baseAddress
                    stream.avail_out = uInt(room)
                    status = inflate(&stream, Z_NO_FLUSH)
                    return room - Int(stream.avail_out)
                }
                if output.readableBytes > maxSize { return .tooLarge }
                switch status {
                case Z_STREAM_END:
                    members += 1
                    if stream.avail_in == 0 { return nil }
                    // Another member follows: start over on the rest of the input.
                    guard inflateReset(&stream) == Z_OK else { return .invalid("zlib could not read the next gzip member") }
                case Z_OK:
                    continue
                case Z_BUF_ERROR where stream.avail_in == 0:
                    return .invalid(members == 0
                        ? "the gzip data is cut short (no end of stream, CRC-32 or length trailer)"
                        : "gzip member \(members + 1) is cut short (no end of stream, CRC-32 or length trailer)")
                case Z_DATA_ERROR:
                    let what = stream.msg.map { String(cString: $0) } ?? "corrupt data"
                    return .invalid(members == 0 ? "the body is not valid gzip data (\(what))" : "gzip member \(members + 1) is not valid gzip data (\(what))")
                default:
                    return .invalid("the body is not valid gzip data (zlib status \(status))")
                }
            }
        }
        if let outcome { throw outcome }
        return output
    }
}

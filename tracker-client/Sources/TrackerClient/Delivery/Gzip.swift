import CTrackerZlib

/// gzip (RFC 1952) through the system's zlib: request bodies shrink to about a tenth (event
/// JSON repeats its field names), which is what a phone's radio time and data plan pay for.
enum Gzip {
    /// `input` compressed at zlib's default level (6).
    static func compress(_ input: [UInt8]) -> [UInt8] {
        var stream = z_stream()
        // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
        let initialized = deflateInit2_(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY,
                                        zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        precondition(initialized == Z_OK, "zlib could not start a deflate stream (\(initialized))")
        defer { deflateEnd(&stream) }
        // deflateBound is an upper bound for one Z_FINISH call; the gzip wrapper adds 18 bytes.
        var output = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(input.count))) + 32)
        let status = input.withUnsafeBufferPointer { inputBuffer in
            output.withUnsafeMutableBufferPointer { outputBuffer in
                stream.next_in = UnsafeMutablePointer(mutating: inputBuffer.baseAddress)
                stream.avail_in = uInt(inputBuffer.count)
                stream.next_out = outputBuffer.baseAddress
                stream.avail_out = uInt(outputBuffer.count)
                return deflate(&stream, Z_FINISH)
            }
        }
        precondition(status == Z_STREAM_END, "deflate did not finish within deflateBound (\(status))")
        output.removeSubrange(Int(stream.total_out)...)
        return output
    }
}

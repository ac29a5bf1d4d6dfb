import NIOCore
import Testing
@testable import TrackerClient
@testable import TrackerServer

/// Request bodies sent with `Content-Encoding: gzip` (PROTOCOL.md: identity or gzip).
struct GunzipTests {
    static let batch = Array(#"{"events":[{"id":"0190a0b0-0000-7000-8000-000000000001"}]}"#.utf8)

    static func gunzip(_ bytes: [UInt8], maxSize: Int = 512 * 1024) throws(Gunzip.Failure) -> [UInt8] {
        var body = try Gunzip.decompress(ByteBuffer(bytes: bytes), maxSize: maxSize)
        return body.readBytes(length: body.readableBytes) ?? []
    }

    @Test func oneMemberDecompressesToTheBody() throws {
        #expect(try Self.gunzip(Gzip.compress(Self.batch)) == Self.batch)
    }

    /// RFC 1952: a gzip file is a series of members; `cat a.gz b.gz` is valid gzip.
    @Test func everyMemberIsRead() throws {
        let first = Array(Self.batch[..<20]), second = Array(Self.batch[20...])
        #expect(try Self.gunzip(Gzip.compress(first) + Gzip.compress(second)) == Self.batch)
    }

    /// A body cut anywhere, even inside the 8-byte CRC-32 and length trailer, is refused:
    /// the data before the cut may be whole, but nothing proves it.
    @Test(arguments: [1, 4, 8, 12])
    func aBodyCutShortIsRefused(cut: Int) {
        let packed = Gzip.compress(Self.batch)
        #expect(throws: Gunzip.Failure.self) { try Self.gunzip(Array(packed.dropLast(cut))) }
        do {
            _ = try Self.gunzip(Array(packed.dropLast(cut)))
        } catch {
            guard case .invalid(let why) = error else { Issue.record("cut \(cut): \(error)"); return }
            #expect(why.contains("cut short") || why.contains("not valid"), "\(why)")
        }
    }

    @Test func aWrongChecksumIsRefused() {
        var packed = Gzip.compress(Self.batch)
        packed[packed.count - 8] ^= 0xFF  // first byte of the CRC-32
        #expect(throws: Gunzip.Failure.invalid("the body is not valid gzip data (incorrect data check)")) {
            try Self.gunzip(packed)
        }
    }

    @Test func bytesAfterTheLastMemberAreRefused() {
        let packed = Gzip.compress(Self.batch) + Array("trailing".utf8)
        #expect(throws: Gunzip.Failure.self) { try Self.gunzip(packed) }
    }

    @Test func plainJSONIsNotGzip() {
        #expect(throws: Gunzip.Failure.self) { try Self.gunzip(Self.batch) }
        #expect(throws: Gunzip.Failure.invalid("the body is empty")) { try Self.gunzip([]) }
    }

    /// A small body that inflates a thousandfold stops at the limit, not after inflating it all.
    @Test func outputPastTheLimitIsTooLarge() throws {
        let bomb = Gzip.compress([UInt8](repeating: 0x20, count: 4 * 1024 * 1024))
        #expect(bomb.count < 8 * 1024)
        #expect(throws: Gunzip.Failure.tooLarge) { try Self.gunzip(bomb, maxSize: 512 * 1024) }
        let exact = [UInt8](repeating: 0x20, count: 512 * 1024)
        #expect(try Self.gunzip(Gzip.compress(exact), maxSize: 512 * 1024) == exact)
    }
}

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif
import CTrackerZlib
import Foundation

/// The queue's folder on disk: numbered append-only segment files of framed records, a cursor
/// file naming the first record not yet delivered, and a lock file.
///
/// A record is a 16-byte header (payload length, CRC-32 of the rest, enqueue time in Unix
/// microseconds; little-endian) and the event's JSON. A record is written with one `pwrite`
/// before the recording call returns; a write that fails is cut off again (`ftruncate`), and a
/// record that was torn anyway (a power loss) fails its CRC when the folder is read back: the
/// segment is cut there and the rest of the queue is kept. Segments are never appended to
/// after a restart, so a damaged tail can never have good records written behind it.
struct QueueFiles: Sendable {
    static let headerBytes = 16

    let directory: String
    private let lock: DescriptorOwner

    /// Opens (creating when missing) and locks the folder, and reads back what it holds.
    /// Throws `inUse` when another tracker holds the lock; any other failure is
    /// `storage(errno)`, and the caller carries on with a queue in memory.
    static func open(directory: String) throws(QueueOpenFailure) -> (QueueFiles, Recovery) {
        // With its parents: on iOS not even Application Support exists until an app makes it.
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        var status = stat()
        guard stat(directory, &status) == 0 else { throw .storage(errno) }
        guard status.st_mode & S_IFMT == S_IFDIR else { throw .storage(ENOTDIR) }
        let lockPath = directory + "/lock"
        let fd = systemOpen(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .storage(errno) }
        let owner = DescriptorOwner(fd)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let e = errno
            throw e == EWOULDBLOCK ? .inUse : .storage(e)
        }
        let files = QueueFiles(directory: directory, lock: owner)
        return (files, files.recover())
    }

    func path(segment: UInt64) -> String {
        let digits = String(segment)
        return directory + "/" + String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".seg"
    }

    // MARK: Writing

    /// A record's bytes: header and payload.
    static func frame(payload: [UInt8], enqueuedAt: Int64) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(headerBytes + payload.count)
        appendLittleEndian(UInt32(payload.count), to: &out)
        appendLittleEndian(UInt32(0), to: &out)
        appendLittleEndian(UInt64(bitPattern: enqueuedAt), to: &out)
        out.append(contentsOf: payload)
        let crc = out.withUnsafeBufferPointer { checksum($0.baseAddress! + 8, $0.count - 8) }
        withUnsafeBytes(of: crc.littleEndian) { for i in 0..<4 { out[4 + i] = $0[i] } }
        return out
    }

    /// Creates segment file `number`; the errno on failure.
    func create(segment number: UInt64) -> Result<SegmentFile, StorageErrno> {
        let fd = systemOpen(path(segment: number), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return .failure(StorageErrno(errno)) }
        return .success(SegmentFile(number: number, descriptor: fd))
    }

    /// Writes `bytes` at `offset` of `file`, all or nothing: a partial write is cut off again.
    /// Returns nil on success, else the errno and whether the file is still usable (the cut
    /// worked, so the file ends where it did before).
    func write(_ bytes: [UInt8], to file: SegmentFile, at offset: Int) -> (errno: Int32, fileUsable: Bool)? {
        var written = 0
        let failure: Int32? = bytes.withUnsafeBytes { buffer in
            while written < buffer.count {
                let n = pwrite(file.descriptor, buffer.baseAddress! + written, buffer.count - written, off_t(offset + written))
                if n > 0 {
                    written += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return n < 0 ? errno : ENOSPC
                }
            }
            return nil
        }
        guard let failure else { return nil }
        let cut = written == 0 || ftruncate(file.descriptor, off_t(offset)) == 0
        return (failure, cut)
    }

    func remove(segment: UInt64) {
        unlink(path(segment: segment))
    }

    /// Forces a segment's data (and, when files were created or removed, the folder's
    /// entries) to storage.
    func sync(_ file: SegmentFile?, folder: Bool) {
        if let file { fsync(file.descriptor) }
        if folder {
            let fd = systemOpen(directory, O_RDONLY | O_CLOEXEC, 0)
            if fd >= 0 {
                fsync(fd)
                close(fd)
            }
        }
    }

    /// Replaces the cursor file (write a new one, then rename over the old). Not synced: a
    /// cursor lost at a power loss only makes delivered events go again, and the server
    /// stores each id once.
    func writeCursor(_ cursor: QueueCursor) {
        var bytes = [UInt8]()
        appendLittleEndian(cursor.segment, to: &bytes)
        appendLittleEndian(UInt64(cursor.offset), to: &bytes)
        let crc = bytes.withUnsafeBufferPointer { checksum($0.baseAddress!, $0.count) }
        appendLittleEndian(crc, to: &bytes)
        let temporary = directory + "/cursor.new"
        let fd = systemOpen(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let ok = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress!, $0.count) == $0.count }
        close(fd)
        if ok { rename(temporary, directory + "/cursor") } else { unlink(temporary) }
    }

    // MARK: Reading

    /// The payloads of `records` (all in one segment, in file order), checked against their
    /// CRC; nil for a record that cannot be read back intact.
    func read(segment: UInt64, _ records: [(offset: Int, length: Int)]) -> [[UInt8]?] {
        guard let first = records.first, let last = records.last else { return [] }
        let fd = systemOpen(path(segment: segment), O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return records.map { _ in nil } }
        defer { close(fd) }
        let start = first.offset
        let end = last.offset + Self.headerBytes + last.length
        var buffer = [UInt8](repeating: 0, count: end - start)
        var got = 0
        buffer.withUnsafeMutableBytes { b in
            while got < b.count {
                let n = pread(fd, b.baseAddress! + got, b.count - got, off_t(start + got))
                if n > 0 { got += n } else if n < 0 && errno == EINTR { continue } else { break }
            }
        }
        return records.map { record in
            let at = record.offset - start
            guard at + Self.headerBytes + record.length <= got,
                  let parsed = Self.parseRecord(buffer, at: at), parsed.length == record.length else { return nil }
            return Array(buffer[(at + Self.headerBytes)..<(at + Self.headerBytes + record.length)])
        }
    }

    /// The record at `at` if its header is sane and its CRC matches.
    static func parseRecord(_ bytes: [UInt8], at: Int) -> (length: Int, enqueuedAt: Int64)? {
        guard at + headerBytes <= bytes.count else { return nil }
        let length = Int(readLittleEndian(bytes, at: at, as: UInt32.self))
        guard length > 0, length <= 1 << 20, at + headerBytes + length <= bytes.count else { return nil }
        let crc = readLittleEndian(bytes, at: at + 4, as: UInt32.self)
        let actual = bytes.withUnsafeBufferPointer { checksum($0.baseAddress! + at + 8, 8 + length) }
        guard crc == actual else { return nil }
        return (length, Int64(bitPattern: readLittleEndian(bytes, at: at + 8, as: UInt64.self)))
    }

    /// Everything the folder holds past the cursor. Segments before the cursor are removed;
    /// a segment is cut at its first damaged record (counted in `damagedBytes`).
    func recover() -> Recovery {
        var recovery = Recovery()
        var numbers: [UInt64] = []
        if let dir = opendir(directory) {
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name.hasSuffix(".seg"), let n = UInt64(name.dropLast(4)) { numbers.append(n) }
            }
            closedir(dir)
        }
        numbers.sort()
        let cursor = readCursor()
        for number in numbers {
            recovery.nextSegment = max(recovery.nextSegment, number + 1)
            if let cursor, number < cursor.segment {
                remove(segment: number)
                continue
            }
            guard let bytes = readWhole(path(segment: number)) else { continue }
            var at = (cursor?.segment == number) ? min(cursor!.offset, bytes.count) : 0
            var kept = 0
            while at < bytes.count {
                guard let record = Self.parseRecord(bytes, at: at) else {
                    recovery.damagedBytes += bytes.count - at
                    let fd = systemOpen(path(segment: number), O_WRONLY | O_CLOEXEC, 0)
                    if fd >= 0 {
                        ftruncate(fd, off_t(at))
                        close(fd)
                    }
                    break
                }
                recovery.records.append(RecoveredRecord(segment: number, offset: at, length: record.length, enqueuedAt: record.enqueuedAt))
                kept += 1
                at += Self.headerBytes + record.length
            }
            if kept == 0 {
                remove(segment: number)
            } else {
                recovery.segments.append(number)
            }
        }
        if let cursor { recovery.nextSegment = max(recovery.nextSegment, cursor.segment + 1) }
        return recovery
    }

    private func readCursor() -> QueueCursor? {
        guard let bytes = readWhole(directory + "/cursor"), bytes.count == 20 else { return nil }
        let crc = bytes.withUnsafeBufferPointer { checksum($0.baseAddress!, 16) }
        guard crc == readLittleEndian(bytes, at: 16, as: UInt32.self) else { return nil }
        return QueueCursor(segment: readLittleEndian(bytes, at: 0, as: UInt64.self),
                           offset: Int(readLittleEndian(bytes, at: 8, as: UInt64.self)))
    }

    private func readWhole(_ path: String) -> [UInt8]? {
        let fd = systemOpen(path, O_RDONLY | O_CLOEXEC, 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress!, $0.count) }
            if n > 0 {
                out.append(contentsOf: chunk[0..<n])
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return n == 0 ? out : nil
            }
        }
    }
}

/// Why the queue's folder could not be opened.
enum QueueOpenFailure: Error {
    case inUse
    case storage(Int32)
}

/// An errno from a failed storage call.
struct StorageErrno: Error, Sendable {
    var code: Int32
    init(_ code: Int32) { self.code = code }
}

/// The first record not yet delivered: a segment and a byte offset in it.
struct QueueCursor: Sendable, Equatable {
    var segment: UInt64
    var offset: Int
}

struct RecoveredRecord: Sendable, Equatable {
    var segment: UInt64
    var offset: Int
    var length: Int
    var enqueuedAt: Int64
}

struct Recovery: Sendable {
    var records: [RecoveredRecord] = []
    var segments: [UInt64] = []
    var nextSegment: UInt64 = 0
    var damagedBytes = 0
}

/// One open segment file. The descriptor is closed with the last reference, so the delivery
/// task can still `fsync` a file the writer has just rotated away from.
final class SegmentFile: Sendable {
    let number: UInt64
    let descriptor: Int32

    init(number: UInt64, descriptor: Int32) {
        self.number = number
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }
}

/// Holds the lock file's descriptor (and so the `flock`) for the queue's life.
private final class DescriptorOwner: Sendable {
    let descriptor: Int32
    init(_ descriptor: Int32) { self.descriptor = descriptor }
    deinit { close(descriptor) }
}

// MARK: - Helpers

private func checksum(_ pointer: UnsafePointer<UInt8>, _ count: Int) -> UInt32 {
    UInt32(truncatingIfNeeded: crc32(0, pointer, uInt(count)))
}

private func appendLittleEndian<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { out.append(contentsOf: $0) }
}

private func readLittleEndian<T: FixedWidthInteger>(_ bytes: [UInt8], at: Int, as: T.Type) -> T {
    var value: T = 0
    for i in 0..<MemoryLayout<T>.size { value |= T(bytes[at + i]) << (8 * i) }
    return value
}

// The C calls under names that do not clash with members called open/read/write.
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}

private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    read(fd, buffer, count)
}

private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(fd, buffer, count)
}

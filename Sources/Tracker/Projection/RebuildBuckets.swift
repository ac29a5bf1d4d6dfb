#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import TrackerPostgres

/// The rebuild's way from the log, in log order, to every ad's events together, without a
/// sort in PostgreSQL and without holding the whole log in memory.
///
/// The log arrives as `COPY … (FORMAT binary)`; each projected event goes, packed as an
/// `AdState` record behind its state's key (its log key; an `ad_loaded` that names its load goes
/// behind the load's key too, as a load reference), into one of `count` spill files chosen by a
/// hash of the key. Every state therefore lands in exactly one file, and one file at a time fits
/// in memory: reading it back and grouping by key gives each ad's and load's whole history.
final class RebuildBuckets {
    let count: Int
    /// Where the spill files are (the rebuild's other spills, `RebuildSum`'s, go there too).
    let directory: String
    private var files: [UnsafeMutablePointer<FILE>]
    private var buffers: [[UInt8]]
    private static let flushAt = 1 << 18
    /// Log rows read and events spilled (every row is one).
    private(set) var rowsRead = 0
    private(set) var eventsSpilled = 0
    /// The invalid-traffic label each event's client earns under the rebuild's rule set.
    private let labelOf: (AdEventRow) -> IVTLabel?
    /// The newest receipt of the rows read.
    private(set) var newestReceipt: Timestamp?

    /// About `eventsPerBucket` events per file for `expectedEvents`, between 1 and 256 files.
    init(expectedEvents: Int, eventsPerBucket: Int, labelOf: @escaping (AdEventRow) -> IVTLabel? = { _ in nil }) throws {
        self.labelOf = labelOf
        count = max(1, min(256, (expectedEvents + eventsPerBucket - 1) / eventsPerBucket))
        let base = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
        var template = Array((base + "/tracker-rebuild-XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw RebuildError.spill("cannot create a directory in \(base) (set TMPDIR)")
        }
        directory = String(cString: made)
        files = []
        buffers = Array(repeating: [], count: count)
        for i in 0..<count {
            guard let f = fopen("\(directory)/\(i)", "w+") else {
                for f in files { fclose(f) }
                throw RebuildError.spill("cannot create a spill file in \(directory)")
            }
            files.append(f)
        }
    }

    deinit {
        for f in files { fclose(f) }
        for i in 0..<count { unlink("\(directory)/\(i)") }
        rmdir(directory)
    }

    // MARK: Spilling the log

    /// Where a binary COPY of one log partition stands: its header comes with the first row.
    struct CopyStream {
        var headerSeen = false
    }

    /// Reads one message of a binary COPY with the columns of `RebuildSQL.copyLog`.
    func spill(_ message: UnsafeRawBufferPointer, _ stream: inout CopyStream) throws {
        var offset = 0
        if !stream.headerSeen {
            // "PGCOPY\n\377\r\n\0", flags (i32), header extension length (i32) and extension.
            guard message.count >= 19, message[0] == UInt8(ascii: "P") else { throw RebuildError.copyFormat }
            offset = 19 + Int(Self.i32(message, 15))
            stream.headerSeen = true
            if offset >= message.count { return }
        }
        let fields = Int(Int16(bitPattern: UInt16(message[offset]) << 8 | UInt16(message[offset + 1])))
        if fields == -1 { return }  // the trailer
        let columns = AdEventColumn.allCases.count
        guard fields == columns else { throw RebuildError.copyFormat }
        offset += 2
        var spans: [(start: Int, length: Int)] = []
        spans.reserveCapacity(columns)
        for _ in 0..<columns {
            guard offset + 4 <= message.count else { throw RebuildError.copyFormat }
            let length = Int(Self.i32(message, offset))
            offset += 4
            guard offset + max(length, 0) <= message.count else { throw RebuildError.copyFormat }
            spans.append((offset, length))
            if length > 0 { offset += length }
        }
        rowsRead += 1
        let value = { (column: AdEventColumn) -> UnsafeRawBufferPointer? in
            let s = spans[column.rawValue]
            return s.length < 0 ? nil : UnsafeRawBufferPointer(rebasing: message[s.start..<s.start + s.length])
        }
        let row: AdEventRow
        do { row = try AdEventRow(value) } catch { throw RebuildError.copyFormat }
        let label = labelOf(row)
        if newestReceipt.map({ $0 < row.receivedAt }) ?? true { newestReceipt = row.receivedAt }
        try spill(row, label: label, under: row.requestId, reference: false)
        if let load = row.referencedLoad {
            try spill(row, label: label, under: load, reference: true)
        }
        eventsSpilled += 1
    }

    /// Appends the row's record behind the state key `key` to the key's spill file: the event
    /// itself, or (`reference`) the load reference of an `ad_loaded` behind its load's key.
    private func spill(_ row: AdEventRow, label: IVTLabel?, under key: UnsafeRawBufferPointer, reference: Bool) throws {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in key { hash = (hash ^ UInt64(b)) &* 0x100_0000_01b3 }
        let bucket = Int(hash % UInt64(count))
        var out = buffers[bucket]
        buffers[bucket] = []
        Self.appendU16(key.count, &out)
        out.append(contentsOf: key)
        AdState.appendRecord(row, label: label, sameUnitAndFormat: false, loadReference: reference, into: &out)
        if out.count >= Self.flushAt {
            try write(out, to: bucket)
            out.removeAll(keepingCapacity: true)
        }
        buffers[bucket] = out
    }

    /// Writes what is still buffered; call once the whole log has been spilled.
    func finishSpilling() throws {
        for i in 0..<count where !buffers[i].isEmpty {
            try write(buffers[i], to: i)
            buffers[i] = []
        }
    }

    private func write(_ bytes: [UInt8], to bucket: Int) throws {
        let written = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, files[bucket]) }
        guard written == bytes.count else { throw RebuildError.spill("cannot write a spill file in \(directory) (disk full?)") }
    }

    // MARK: Reading a bucket back

    /// Every state (ad or load) of bucket `index` with all its projected events (in no particular order).
    func ads(in index: Int, strings: inout StringTable) throws -> [String: [AdEvent]] {
        let f = files[index]
        fflush(f)
        fseek(f, 0, SEEK_END)
        let size = ftell(f)
        fseek(f, 0, SEEK_SET)
        var bytes = [UInt8](repeating: 0, count: size)
        let read = bytes.withUnsafeMutableBytes { fread($0.baseAddress, 1, size, f) }
        guard read == size else { throw RebuildError.spill("cannot read back a spill file in \(directory)") }
        var ads: [String: [AdEvent]] = [:]
        try bytes.withUnsafeBytes { all in
            var reader = ByteReader(all)
            var unit = "", format = ""
            while !reader.isAtEnd {
                guard let length = reader.u16(), let requestId = reader.take(length),
                      let event = AdState.decodeRecord(&reader, unit: &unit, format: &format, first: true, strings: &strings)
                else { throw RebuildError.spillFormat }
                ads[String(decoding: requestId, as: UTF8.self), default: []].append(event)
            }
        }
        return ads
    }

    // MARK: Binary helpers

    static func i32(_ b: UnsafeRawBufferPointer, _ at: Int) -> Int32 {
        Int32(bitPattern: UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3]))
    }

    static func appendU16(_ v: Int, _ out: inout [UInt8]) {
        out.appendBigEndian(UInt16(truncatingIfNeeded: v))
    }
}

enum RebuildError: Error, Sendable, CustomStringConvertible {
    case spill(String)
    case spillFormat
    case copyFormat

    var description: String {
        switch self {
        case .spill(let message): "rebuild: \(message)"
        case .spillFormat: "rebuild: a spill file does not hold what was written to it"
        case .copyFormat: "rebuild: unexpected binary COPY data from the log"
        }
    }
}

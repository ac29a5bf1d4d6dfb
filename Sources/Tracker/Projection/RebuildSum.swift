#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOConcurrencyHelpers
import TrackerPostgres

/// The rebuild's sum of every ad's contribution, in bounded memory whatever the number of
/// distinct rows the log makes (quarter hours × ad units × formats × asset keys × …).
///
/// The projecting threads add to it as they go. Up to `rowsInMemory` distinct rows are summed
/// in memory; past them, the rows held go to a `RowSpill`, each to the partition its day row
/// hashes to, and the sum starts again. At the end every partition is read back and summed on its
/// own, so a row is still written once unless a single partition holds more than
/// `rowsInMemory` distinct rows; then it is written in parts, which add up to the same (the
/// writer adds each part to the rows it finds, and a rebuild's parts are never negative).
final class RebuildSum: @unchecked Sendable {
    // @unchecked Sendable: `held` is touched only under `lock`; `spill` is itself locked.
    private let lock = NIOLock()
    private var held = Contribution()
    private let spill: RowSpill
    private let rowsInMemory: Int

    init(directory: String, rowsInMemory: Int) throws {
        self.rowsInMemory = max(1, rowsInMemory)
        spill = try RowSpill(directory: directory, partitions: 16)
    }

    /// Adds `contribution`; spills what is held when it passes `rowsInMemory` rows.
    func add(_ contribution: Contribution) throws {
        guard !contribution.rows.isEmpty else { return }
        try lock.withLock {
            held.add(contribution)
            if held.rows.count >= rowsInMemory {
                try spill.append(held)
                held = Contribution()
            }
        }
    }

    /// Hands every row summed to `write`, in parts of at most `rowsPerWrite` rows (call it once,
    /// after the last `add`).
    func write(rowsPerWrite: Int, _ write: (Contribution) throws -> Void) throws {
        try lock.withLock {
            guard spill.rows > 0 else {
                try Self.parts(of: held, rowsPerWrite: rowsPerWrite, write)
                return
            }
            try spill.append(held)
            held = Contribution()
            for partition in 0..<spill.partitions {
                var sum = Contribution()
                try spill.forEachRow(in: partition) { key, values in
                    sum.add(key, values)
                    if sum.rows.count >= rowsInMemory {
                        try Self.parts(of: sum, rowsPerWrite: rowsPerWrite, write)
                        sum = Contribution()
                    }
                }
                try Self.parts(of: sum, rowsPerWrite: rowsPerWrite, write)
            }
        }
    }

    /// `sum`'s non-zero rows handed to `write` about `rowsPerWrite` at a time (the writer's
    /// working copies are as large as what it is given), the quarter hours of one day row in one
    /// part: the writer writes a day row, and reads and writes a half-day row whole, once per
    /// part it is in, and each write past the first leaves the row's old version dead in a
    /// table the rebuild has just made (a larger table for every report to read until vacuum).
    private static func parts(of sum: Contribution, rowsPerWrite: Int, _ write: (Contribution) throws -> Void) throws {
        let order = sum.rows.keys.map { (row: $0.dayRow.hashValue, key: $0) }.sorted { $0.row < $1.row }
        var part = Contribution()
        var previous: Int?
        for (row, key) in order {
            guard let values = sum.rows[key], values != Measures() else { continue }
            if part.rows.count >= rowsPerWrite, row != previous {
                try write(part)
                part = Contribution()
            }
            part.add(key, values)
            previous = row
        }
        if !part.rows.isEmpty { try write(part) }
    }
}

/// Projection rows on disk, in partitions by a hash of their day row: the part of a rebuild's sum it
/// does not hold in memory. A row takes some 40 bytes here against half a KiB in a `Contribution`.
///
/// The files are unlinked as soon as they are made: they go with the process, however it ends.
final class RowSpill: @unchecked Sendable {
    // @unchecked Sendable: the files and `rows` are touched only under `lock`.
    private let lock = NIOLock()
    private let files: [UnsafeMutablePointer<FILE>]
    private var written = 0
    let partitions: Int

    /// `partitions` files in `directory`, which must exist.
    init(directory: String, partitions: Int) throws {
        var files: [UnsafeMutablePointer<FILE>] = []
        for p in 0..<max(1, partitions) {
            let path = "\(directory)/rows-\(p)"
            guard let file = fopen(path, "w+") else {
                for f in files { fclose(f) }
                throw RebuildError.spill("cannot create a spill file in \(directory)")
            }
            unlink(path)
            files.append(file)
        }
        self.files = files
        self.partitions = files.count
    }

    deinit {
        for f in files { fclose(f) }
    }

    /// Rows written so far.
    var rows: Int { lock.withLock { written } }

    /// Appends the non-zero rows of `contribution`, each to its key's partition.
    func append(_ contribution: Contribution) throws {
        var buffers = [[UInt8]](repeating: [], count: partitions)
        var count = 0
        for (key, values) in contribution.rows where values != Measures() {
            // By the day row: its quarter hours (both half-day rows) are summed and written together.
            let partition = Int(UInt(bitPattern: key.dayRow.hashValue) % UInt(partitions))
            Self.encode(key, values, into: &buffers[partition])
            count += 1
        }
        try lock.withLock {
            for (partition, bytes) in buffers.enumerated() where !bytes.isEmpty {
                let done = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, files[partition]) }
                guard done == bytes.count else { throw RebuildError.spill("cannot write a spill file (disk full?)") }
            }
            written += count
        }
    }

    /// Every row of `partition`, in the order written.
    func forEachRow(in partition: Int, _ body: (ProjectionKey, Measures) throws -> Void) throws {
        try lock.withLock {
            let file = files[partition]
            guard fflush(file) == 0, fseek(file, 0, SEEK_SET) == 0 else { throw RebuildError.spill("cannot read back a spill file") }
            var strings = StringTable()
            // A record's length is a u16: one buffer holds any.
            var record = [UInt8](repeating: 0, count: 1 << 16)
            while fread(&record, 1, 2, file) == 2 {
                let length = Int(record[0]) << 8 | Int(record[1])
                guard fread(&record, 1, length, file) == length else { throw RebuildError.spillFormat }
                let row = record.withUnsafeBytes { Self.decode(UnsafeRawBufferPointer(rebasing: $0[..<length]), strings: &strings) }
                guard let (key, values) = row else { throw RebuildError.spillFormat }
                try body(key, values)
            }
            guard ferror(file) == 0 else { throw RebuildError.spill("cannot read back a spill file") }
        }
    }

    // MARK: A row's bytes

    /// u16 length of what follows; table, traffic class, quarter hour; the six text dimensions
    /// (u16 length and UTF-8 each); position; a bit per non-zero lane, then those lanes.
    private static func encode(_ key: ProjectionKey, _ values: Measures, into out: inout [UInt8]) {
        let start = out.count
        out.append(0)
        out.append(0)
        out.append(UInt8(bitPattern: key.table.rawValue))
        out.append(UInt8(truncatingIfNeeded: key.trafficClass.rawValue))
        out.appendBigEndian(key.quarterHour.index)
        for text in [key.adUnit, key.formatId, key.assetKey, key.adapter, key.label, key.errorCode] {
            out.appendBigEndian(UInt16(truncatingIfNeeded: text.utf8.count))
            out.append(contentsOf: text.utf8)
        }
        out.appendBigEndian(key.position)
        var lanes: UInt32 = 0
        for lane in values.indices where values[lane] != 0 { lanes |= 1 << UInt32(lane) }
        out.appendBigEndian(lanes)
        for lane in values.indices where values[lane] != 0 { out.appendBigEndian(values[lane]) }
        let length = out.count - start - 2
        out[start] = UInt8(truncatingIfNeeded: length >> 8)
        out[start + 1] = UInt8(truncatingIfNeeded: length)
    }

    private static func decode(_ bytes: UnsafeRawBufferPointer, strings: inout StringTable) -> (ProjectionKey, Measures)? {
        var reader = ByteReader(bytes)
        guard let table = reader.u8().flatMap({ ProjectionTable(rawValue: Int8(bitPattern: $0)) }),
              let trafficClass = reader.u8().flatMap({ TrafficClass(rawValue: Int16($0)) }),
              let quarter = reader.i32() else { return nil }
        var texts: [String] = []
        texts.reserveCapacity(6)
        for _ in 0..<6 {
            guard let text = reader.string(&strings) else { return nil }
            texts.append(text)
        }
        guard let position = reader.i32(), let lanes = reader.i32().map({ UInt32(bitPattern: $0) }) else { return nil }
        var values = Measures()
        for lane in values.indices where lanes & (1 << UInt32(lane)) != 0 {
            guard let value = reader.i64() else { return nil }
            values[lane] = value
        }
        guard reader.isAtEnd else { return nil }
        let key = ProjectionKey(table: table, trafficClass: trafficClass, quarterHour: QuarterHour(index: quarter), adUnit: texts[0],
                                formatId: texts[1], assetKey: texts[2], adapter: texts[3], label: texts[4], errorCode: texts[5],
                                position: position)
        return (key, values)
    }
}

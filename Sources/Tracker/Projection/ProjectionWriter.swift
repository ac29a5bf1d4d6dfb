/// The two time grains every projection table is kept in.
///
/// Rows arrive per UTC quarter hour (`ProjectionKey.quarterHour`). The day tables get them
/// summed by UTC day; the quarters tables get them as running counts, 48 quarter hours to a
/// row (`sql/012_quarter_blocks.sql`). Reports of UTC days read the day tables; reports in
/// another zone or by hour take a slice of one or two quarters rows per local day or hour.
public enum ProjectionGrain: Sendable, Hashable, CaseIterable {
    case day
    case quarters

    /// The column holding the row's time.
    public var column: String {
        switch self {
        case .day: "day"
        case .quarters: "quarters_from"
        }
    }

    /// The table name's suffix.
    var suffix: String {
        switch self {
        case .day: "day"
        case .quarters: "quarters"
        }
    }

    /// The SQL that turns the int8 sent for a row's time (days or half days since the epoch,
    /// `c` being its alias) into the column's value.
    func value(_ c: String) -> String {
        switch self {
        case .day: "date '1970-01-01' + \(c)::int"
        case .quarters: "timestamptz '1970-01-01 00:00:00+00' + \(c) * interval '12 hours'"
        }
    }
}

/// A quarters row covers 48 UTC quarter hours (half a day) and keeps each measure's 49 running
/// counts (running count j: the events of the half day's first j quarter hours; count 0 is 0)
/// sparsely, so a row costs bytes in proportion to the quarter hours that had events
/// (`sql/014_sparse_quarters.sql`):
///
/// - `mask` (int8): bit k set when quarter hour k changed any count of the row;
/// - `counts` (bytea): for each set bit in order, the running counts after that quarter hour,
///   measure by measure, each a big-endian int64.
///
/// Running count j is then the entry of the last set bit below j, or 0 when there is none:
/// `entry(mask, element: j)`, one popcount. PostgreSQL finds it the same way when a report
/// cuts a row at a local midnight (`ReportSQL`).
enum QuarterBlock {
    static let quarters: Int32 = 48
    static let counts = Int(quarters) + 1
    static let microseconds: Int64 = 12 * 3_600_000_000

    /// The entry (from 0) of a row with `mask` that holds running count `element` (0...48), or
    /// -1 when that count is 0.
    @inline(__always)
    static func entry(_ mask: UInt64, element: Int) -> Int {
        (mask & ((1 << UInt64(truncatingIfNeeded: element)) &- 1)).nonzeroBitCount - 1
    }

    /// The int64 at `index` (entry times width plus measure) of a `counts` value.
    @inline(__always)
    static func value(_ bytes: UnsafeRawBufferPointer, _ index: Int) -> Int64 {
        Int64(bigEndian: bytes.loadUnaligned(fromByteOffset: index &* 8, as: Int64.self))
    }

    /// Whether `counts` is as long as a row with `mask` of `width` measures holds.
    static func fits(mask: UInt64, counts: Int, width: Int) -> Bool {
        mask >> UInt64(quarters) == 0 && counts == mask.nonzeroBitCount * width * 8
    }

    /// The running counts of a stored row, dense: element j's measures at `j * width` on.
    static func expand(mask: UInt64, counts: UnsafeRawBufferPointer, width: Int, into values: inout [Int64]) {
        var entry = -1
        for m in 0..<width { values[m] = 0 }
        for element in 1...Int(quarters) {
            let first = element * width
            if mask & (1 << UInt64(element - 1)) != 0 {
                entry += 1
                for m in 0..<width { values[first + m] = value(counts, entry * width + m) }
            } else {
                for m in 0..<width { values[first + m] = values[first - width + m] }
            }
        }
    }

    /// The stored form of dense running counts (49 × `width`): the mask it returns, and the
    /// entries written to `bytes`.
    static func compact(_ values: [Int64], width: Int, into bytes: inout [UInt8]) -> UInt64 {
        bytes.removeAll(keepingCapacity: true)
        var mask: UInt64 = 0
        for element in 1...Int(quarters) {
            let first = element * width
            guard (0..<width).contains(where: { values[first + $0] != values[first - width + $0] }) else { continue }
            mask |= 1 << UInt64(element - 1)
            for m in 0..<width { bytes.appendBigEndian(values[first + m]) }
        }
        return mask
    }
}

/// Signed row changes bound for the projection tables, written (`ProjectionWriter.apply`) each
/// time they reach `rowsPerWrite` rows, so that what a projector step holds of them is bounded
/// however many distinct ad units, formats, asset keys and adapters its events name.
///
/// A sum written in parts gives the tables what the sum written whole gives (the writer adds
/// each part to the rows it finds), provided no part takes a count below zero: the caller adds
/// whole ads (an ad's new contribution and its old one) before it asks for a write.
struct ProjectionChanges {
    let rowsPerWrite: Int
    /// What the changed ads contribute now, and what they contributed before.
    var added = Contribution()
    var removed = Contribution()

    /// The advisory lock taken before the first write (`nil`: none, the caller is the only writer).
    private var lock: String?

    init(rowsPerWrite: Int, lock: String? = nil) {
        self.rowsPerWrite = max(1, rowsPerWrite)
        self.lock = lock
    }

    /// Takes `lock`, if it is not held yet; it is held until the transaction ends.
    mutating func lockOnce(on connection: Connection) throws {
        guard let name = lock else { return }
        try connection.lockForTransaction(name)
        lock = nil
    }

    /// Writes the changes held when they reach `rowsPerWrite` rows.
    mutating func writeIfFull(on connection: Connection) throws {
        if added.rows.count + removed.rows.count >= rowsPerWrite { try write(on: connection) }
    }

    /// Writes every change held.
    mutating func write(on connection: Connection) throws {
        var delta = Contribution()
        swap(&delta, &added)
        delta.subtract(removed)
        removed = Contribution()
        try lockOnce(on: connection)
        // Rows that cancelled out are left to the writer, which skips them: no copy without them.
        try ProjectionWriter.apply(delta, on: connection)
    }
}

/// Adds signed row changes to the projection tables: by day one upsert per table, by half day
/// a read of the rows' counts, an upsert of their new counts and a delete of the emptied ones.
///
/// A row whose measures all return to zero is deleted, so the incrementally maintained
/// tables hold exactly the rows a rebuild writes (it writes only non-zero rows).
///
/// The half-day rows are read, added to and written back, so the caller must be their only
/// writer until it commits: a projector step holds the projector's lock (`ProjectorSQL.lock`),
/// or, as one of the groups' projectors, the lock of the rows (`ProjectorSQL.rowsLock`); a
/// rebuild writes tables of its own schema before it swaps them in under the projector's lock.
enum ProjectionWriter {
    static func apply(_ delta: Contribution, on connection: Connection) throws {
        for table in ProjectionTable.allCases {
            let quarters = delta.rows.filter { $0.key.table == table }
            guard !quarters.isEmpty else { continue }
            try writeQuarters(quarters, table, on: connection)
            // The same changes by UTC day; a change that moved counts between quarter hours of
            // one day leaves that day's row as it is.
            var days: [ProjectionKey: Measures] = [:]
            for (key, values) in quarters {
                days[key.dayRow, default: Measures()] &+= values
            }
            let changedDays = days.filter { $0.value != Measures() }
            guard !changedDays.isEmpty else { continue }
            try writeDays(changedDays.map { ($0.key, $0.key.quarterHour.day.daysSinceEpoch, $0.value) }, table, on: connection)
        }
    }

    /// The quarter-hour changes added to the running counts of their half-day rows: each row's
    /// counts are read (PostgreSQL has no arithmetic on a bytea), running count k + 1 of each
    /// measure grows by the changes of the row's quarter hours up to k, and the row is written
    /// back whole, or deleted when it holds nothing.
    private static func writeQuarters(_ quarters: [ProjectionKey: Measures], _ table: ProjectionTable, on connection: Connection) throws {
        // Each half-day row's changes by quarter hour, only those it has: most rows of a step
        // change in one quarter hour, and 48 dense vectors a row would multiply what a step
        // holds by the distinct keys it touches.
        var blocks: [ProjectionKey: [(offset: Int32, values: Measures)]] = [:]
        for (key, values) in quarters where values != Measures() {
            blocks[key.halfDayRow, default: []].append((offset: Self.block(of: key.quarterHour).offset, values: values))
        }
        let rows = Array(blocks)
        blocks = [:]
        guard !rows.isEmpty else { return }
        let statements = table.statements(.quarters)
        let width = statements.width
        var keys = KeyColumns(table, capacity: rows.count)
        for (key, _) in rows { keys.append(key, time: Int64(key.quarterHour.index / QuarterBlock.quarters)) }
        let stored = try connection.query(table.readCounts, keys.parameters, binaryResults: true)
        // Each row's place in `rows` (1-based, the statement's ordinality) to its stored counts.
        var storedRow: [Int: (row: Int, mask: UInt64)] = [:]
        for r in 0..<stored.rowCount {
            guard let ordinal = ByteReader.int64(stored.bytes(r, 0)), let mask = ByteReader.int64(stored.bytes(r, 1)),
                  QuarterBlock.fits(mask: UInt64(bitPattern: mask), counts: stored.bytes(r, 2).count, width: width) else {
                throw DatabaseError(.unexpectedResult, serverMessage: "\(table.tableName(.quarters)): a row's counts do not match its mask")
            }
            storedRow[Int(ordinal)] = (r, UInt64(bitPattern: mask))
        }
        var written = KeyColumns(table, capacity: rows.count), emptied = KeyColumns(table, capacity: 0)
        var masks = BinaryArray(.int8, capacity: rows.count), counts = BinaryArray(.bytea, capacity: rows.count)
        var values = [Int64](repeating: 0, count: QuarterBlock.counts * width)
        var bytes: [UInt8] = []
        for (place, (key, changes)) in rows.enumerated() {
            if let (r, mask) = storedRow[place + 1] {
                QuarterBlock.expand(mask: mask, counts: stored.bytes(r, 2), width: width, into: &values)
            } else {
                for i in values.indices { values[i] = 0 }
            }
            // Running count k + 1 grows by the changes of quarter hours 0...k.
            let sorted = changes.sorted { $0.offset < $1.offset }
            var running = Measures()
            var next = 0
            for k in Int(sorted[0].offset)..<Int(QuarterBlock.quarters) {
                while next < sorted.count, sorted[next].offset == k {
                    running &+= sorted[next].values
                    next += 1
                }
                let first = (k + 1) * width
                for m in 0..<width { values[first + m] &+= running[m] }
            }
            let time = Int64(key.quarterHour.index / QuarterBlock.quarters)
            // Its counts are never negative, so a row no quarter hour of which changes them holds nothing.
            let mask = QuarterBlock.compact(values, width: width, into: &bytes)
            if mask == 0 {
                emptied.append(key, time: time)
                continue
            }
            written.append(key, time: time)
            masks.append(Int64(bitPattern: mask))
            counts.append(bytes: bytes)
        }
        if written.count > 0 {
            try connection.query(statements.upsert, written.parameters + [masks.parameter, counts.parameter])
        }
        if emptied.count > 0 {
            try connection.query(statements.deleteEmpty, emptied.parameters)
        }
    }

    /// The half day (since the epoch) a quarter hour belongs to, and its place in it.
    static func block(of quarter: QuarterHour) -> (block: Int32, offset: Int32) {
        let (q, r) = quarter.index.quotientAndRemainder(dividingBy: QuarterBlock.quarters)
        return r < 0 ? (q - 1, r + QuarterBlock.quarters) : (q, r)
    }

    /// Upserts `rows` (key, day since the epoch, measures) into one table's day rows; only a
    /// subtraction can empty a row, so the empty ones are looked for only after one.
    private static func writeDays(_ rows: [(key: ProjectionKey, time: Int32, values: Measures)], _ table: ProjectionTable,
                                  on connection: Connection) throws {
        let statements = table.statements(.day)
        var keys = KeyColumns(table, capacity: rows.count)
        var measures = (0..<statements.width).map { _ in BinaryArray(.int8, capacity: rows.count) }
        for (key, t, values) in rows {
            keys.append(key, time: Int64(t))
            for m in 0..<statements.width { measures[m].append(values[m]) }
        }
        let keyParameters = keys.parameters
        try connection.query(statements.upsert, keyParameters + measures.map(\.parameter))
        if rows.contains(where: { $0.values.min() < 0 }) { try connection.query(statements.deleteEmpty, keyParameters) }
    }

    /// The key columns of the rows one statement writes, in the statements' order: traffic
    /// class, time (the grain's column), then the table's dimensions.
    private struct KeyColumns {
        private var arrays: [BinaryArray]
        private let dimensions: [ProjectionDimension]
        private(set) var count = 0

        init(_ table: ProjectionTable, capacity: Int) {
            dimensions = table.dimensions
            arrays = [BinaryArray(.int8, capacity: capacity), BinaryArray(.int8, capacity: capacity)]
                + dimensions.map { BinaryArray($0.isText ? .text : .int4, capacity: capacity) }
        }

        mutating func append(_ key: ProjectionKey, time t: Int64) {
            arrays[0].append(Int64(key.trafficClass.rawValue))
            arrays[1].append(t)
            for (i, d) in dimensions.enumerated() {
                if d.isText { arrays[2 + i].append(key.text(d)) } else { arrays[2 + i].append(key.position) }
            }
            count += 1
        }

        var parameters: [Parameter] { arrays.map(\.parameter) }
    }
}

extension ProjectionKey {
    /// The key of the half-day row (`QuarterBlock`) this quarter hour's changes go to: its
    /// quarter hour the first of its half day.
    var halfDayRow: ProjectionKey {
        var key = self
        key.quarterHour = QuarterHour(index: ProjectionWriter.block(of: quarterHour).block * QuarterBlock.quarters)
        return key
    }

    /// The key of the day row (a row of the `…_day` tables) this quarter hour's changes are
    /// summed into: its quarter hour the first of its UTC day. It holds both half-day rows of
    /// the day.
    var dayRow: ProjectionKey {
        var key = self
        key.quarterHour = QuarterHour(index: quarterHour.day.daysSinceEpoch * QuarterHour.perDay)
        return key
    }
}

extension ProjectionTable {
    /// The table's two statements in one grain and its number of measures, built once (every
    /// projector step uses them).
    func statements(_ grain: ProjectionGrain) -> (upsert: String, deleteEmpty: String, width: Int) {
        Self.built[Pair(table: self, grain: grain)]!
    }

    /// The statement that reads the counts of the half-day rows a step changes, built once.
    var readCounts: String { Self.readCountsBuilt[self]! }

    private struct Pair: Hashable {
        var table: ProjectionTable
        var grain: ProjectionGrain
    }

    private static let built = Dictionary(uniqueKeysWithValues: allCases.flatMap { table in
        ProjectionGrain.allCases.map { grain in
            (Pair(table: table, grain: grain),
             (upsert: table.upsertSQL(grain), deleteEmpty: table.deleteEmptySQL(grain), width: table.measureColumns.count))
        }
    })

    private static let readCountsBuilt = Dictionary(uniqueKeysWithValues: allCases.map { ($0, $0.readCountsSQL()) })

    /// The table's name in one grain: `format_day`, `format_quarters`, ….
    public func tableName(_ grain: ProjectionGrain) -> String {
        let stem = switch self {
        case .format: "format"
        case .asset: "asset"
        case .source: "source"
        case .ivt: "ivt"
        case .funnel: "funnel"
        case .failure: "failure"
        case .waterfall: "waterfall"
        }
        return "\(stem)_\(grain.suffix)"
    }

    /// The key arrays' rows (`$1…` as in `upsertSQL`) matched with the table's rows as `t`.
    private func keyMatch(_ grain: ProjectionGrain, ordinality: Bool = false) -> (from: String, match: String) {
        let dims = dimensionColumns
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for (i, d) in dimensions.enumerated() { arrays.append("$\(3 + i)::\(d.isText ? "text" : "int4")[]") }
        var match = ["t.traffic_class = u.c0", "t.\(grain.column) = \(grain.value("u.c1"))"]
        for (i, d) in dims.enumerated() { match.append("t.\(d) = u.c\(2 + i)") }
        let aliases = (0..<arrays.count).map { "c\($0)" } + (ordinality ? ["o"] : [])
        return ("unnest(\(arrays.joined(separator: ", ")))\(ordinality ? " WITH ORDINALITY" : "") AS u(\(aliases.joined(separator: ", ")))",
                match.joined(separator: " AND "))
    }

    /// Deletes the rows named by the key arrays whose measures are all zero; in the quarters
    /// grain the projector names only rows it found empty.
    private func deleteEmptySQL(_ grain: ProjectionGrain) -> String {
        let (from, match) = keyMatch(grain)
        let empty = switch grain {
        case .day: measureColumns.map { " AND t.\($0) = 0" }.joined()
        case .quarters: ""
        }
        return "DELETE FROM \(tableName(grain)) AS t USING \(from) WHERE \(match)\(empty)"
    }

    /// The stored counts of the half-day rows named by the key arrays: each row's place among
    /// them (1-based), its mask and its counts.
    private func readCountsSQL() -> String {
        let (from, match) = keyMatch(.quarters, ordinality: true)
        return "SELECT u.o::int8, t.mask, t.counts FROM \(from) JOIN \(tableName(.quarters)) AS t ON \(match)"
    }

    /// An upsert over unnest'ed arrays, from the fixed column lists above (identifiers, never
    /// values): by day `INSERT … ON CONFLICT DO UPDATE SET m = m + excluded.m`, each measure a
    /// parameter; in the quarters grain the rows' new mask and counts whole.
    private func upsertSQL(_ grain: ProjectionGrain) -> String {
        let dims = dimensionColumns
        let measures = grain == .day ? measureColumns : ["mask", "counts"]
        let columns = ["traffic_class", grain.column] + dims + measures
        let key = [grain.column] + dims + ["traffic_class"]
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for (i, d) in dimensions.enumerated() { arrays.append("$\(3 + i)::\(d.isText ? "text" : "int4")[]") }
        let elements = grain == .day ? measures.map { _ in "int8" } : ["int8", "bytea"]
        for (i, element) in elements.enumerated() { arrays.append("$\(3 + dims.count + i)::\(element)[]") }
        let aliases = (0..<columns.count).map { "c\($0)" }
        let select = ["c0::smallint", grain.value("c1")] + aliases[2...]
        let update = switch grain {
        case .day: measures.map { "\($0) = t.\($0) + excluded.\($0)" }
        case .quarters: ["mask = excluded.mask", "counts = excluded.counts"]
        }
        return """
            INSERT INTO \(tableName(grain)) AS t (\(columns.joined(separator: ", ")))
            SELECT \(select.joined(separator: ", "))
            FROM unnest(\(arrays.joined(separator: ", "))) AS u(\(aliases.joined(separator: ", ")))
            ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE SET
            \(update.joined(separator: ", "))
            """
    }
}


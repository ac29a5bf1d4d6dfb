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
    var column: String {
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

/// A quarters row covers 48 UTC quarter hours (half a day): 49 running counts of each measure,
/// held in its `counts` column as big-endian int64s, element by element and measure by measure
/// within an element (`sql/013_quarter_counts.sql`).
enum QuarterBlock {
    static let quarters: Int32 = 48
    static let counts = Int(quarters) + 1
    static let microseconds: Int64 = 12 * 3_600_000_000

    /// The length of a `counts` value of `width` measures.
    static func byteCount(width: Int) -> Int { counts * width * 8 }

    /// The int64 at `index` (element times width plus measure) of a `counts` value.
    @inline(__always)
    static func value(_ bytes: UnsafeRawBufferPointer, _ index: Int) -> Int64 {
        Int64(bigEndian: bytes.loadUnaligned(fromByteOffset: index &* 8, as: Int64.self))
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
/// and a rebuild writes tables of its own schema before it swaps them in under that lock.
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
                var dayKey = key
                dayKey.quarterHour = QuarterHour(index: key.quarterHour.index - key.quarterHour.index % QuarterHour.perDay)
                days[dayKey, default: Measures()] &+= values
            }
            let changedDays = days.filter { $0.value != Measures() }
            guard !changedDays.isEmpty else { continue }
            try writeDays(changedDays.map { ($0.key, $0.key.quarterHour.day.daysSinceEpoch, $0.value) }, table, on: connection)
        }
    }

    /// The quarter-hour changes added to the running counts of their half-day rows: each row's
    /// counts are read (PostgreSQL has no arithmetic on a bytea), element k + 1 of each measure
    /// grows by the changes of the row's quarter hours before k, and the row is written back
    /// whole, or deleted when it holds nothing.
    private static func writeQuarters(_ quarters: [ProjectionKey: Measures], _ table: ProjectionTable, on connection: Connection) throws {
        var blocks: [ProjectionKey: [Measures]] = [:]
        for (key, values) in quarters {
            var blockKey = key
            let (block, offset) = Self.block(of: key.quarterHour)
            blockKey.quarterHour = QuarterHour(index: block * QuarterBlock.quarters)
            blocks[blockKey, default: Array(repeating: Measures(), count: Int(QuarterBlock.quarters))][Int(offset)] &+= values
        }
        let rows = blocks.filter { $0.value.contains { $0 != Measures() } }
        guard !rows.isEmpty else { return }
        let statements = table.statements(.quarters)
        let width = statements.width, length = QuarterBlock.byteCount(width: width)
        var keys = KeyColumns(capacity: rows.count)
        for (key, _) in rows { keys.append(key, time: Int64(key.quarterHour.index / QuarterBlock.quarters), table: table) }
        let stored = try connection.query(table.readCounts, keys.parameters(table).map(\.parameter), binaryResults: true)
        // Each row's place in `rows` (1-based, the statement's ordinality) to its stored counts.
        var storedRow: [Int: Int] = [:]
        for r in 0..<stored.rowCount {
            guard let ordinal = ByteReader.int64(stored.bytes(r, 0)), stored.bytes(r, 1).count == length else {
                throw DatabaseError(.unexpectedResult, serverMessage: "\(table.tableName(.quarters)): a row's counts are not \(length) bytes")
            }
            storedRow[Int(ordinal)] = r
        }
        var written = KeyColumns(capacity: rows.count), emptied = KeyColumns(capacity: 0)
        var counts = BinaryArray(.bytea, capacity: rows.count * length / 16)
        var values = [Int64](repeating: 0, count: QuarterBlock.counts * width)
        var bytes = [UInt8](repeating: 0, count: length)
        for (place, (key, perQuarter)) in rows.enumerated() {
            if let r = storedRow[place + 1] {
                let old = stored.bytes(r, 1)
                for i in values.indices { values[i] = QuarterBlock.value(old, i) }
            } else {
                for i in values.indices { values[i] = 0 }
            }
            var running = Measures()
            for (k, change) in perQuarter.enumerated() {
                running &+= change
                let first = (k + 1) * width
                for m in 0..<width { values[first + m] &+= running[m] }
            }
            let time = Int64(key.quarterHour.index / QuarterBlock.quarters)
            // Its counts are never negative, so a row whose counts are all 0 holds nothing.
            if values.allSatisfy({ $0 == 0 }) {
                emptied.append(key, time: time, table: table)
                continue
            }
            bytes.withUnsafeMutableBytes { out in
                for (i, value) in values.enumerated() { out.storeBytes(of: value.bigEndian, toByteOffset: i * 8, as: Int64.self) }
            }
            written.append(key, time: time, table: table)
            counts.append(bytes: bytes)
        }
        if written.count > 0 {
            try connection.query(statements.upsert, written.parameters(table).map(\.parameter) + [counts.parameter])
        }
        if emptied.count > 0 {
            try connection.query(statements.deleteEmpty, emptied.parameters(table).map(\.parameter))
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
        var keys = KeyColumns(capacity: rows.count)
        var measures = (0..<statements.width).map { _ in BinaryArray(.int8, capacity: rows.count) }
        for (key, t, values) in rows {
            keys.append(key, time: Int64(t), table: table)
            for m in 0..<statements.width { measures[m].append(values[m]) }
        }
        let keyParameters = keys.parameters(table).map(\.parameter)
        try connection.query(statements.upsert, keyParameters + measures.map(\.parameter))
        if rows.contains(where: { $0.values.min() < 0 }) { try connection.query(statements.deleteEmpty, keyParameters) }
    }

    /// The key columns of the rows one statement writes, in the statements' order: traffic
    /// class, time (the grain's column), ad unit, format and, but for the format table, the
    /// table's second dimension.
    private struct KeyColumns {
        var trafficClass: BinaryArray, time: BinaryArray, adUnit: BinaryArray, formatId: BinaryArray, second: BinaryArray
        private(set) var count = 0

        init(capacity: Int) {
            trafficClass = BinaryArray(.int8, capacity: capacity)
            time = BinaryArray(.int8, capacity: capacity)
            adUnit = BinaryArray(.text, capacity: capacity)
            formatId = BinaryArray(.text, capacity: capacity)
            second = BinaryArray(.text, capacity: capacity)
        }

        mutating func append(_ key: ProjectionKey, time t: Int64, table: ProjectionTable) {
            trafficClass.append(Int64(key.trafficClass.rawValue))
            time.append(t)
            adUnit.append(key.adUnit)
            formatId.append(key.formatId)
            if let s = key.secondDimension(table) { second.append(s) }
            count += 1
        }

        func parameters(_ table: ProjectionTable) -> [BinaryArray] {
            table == .format ? [trafficClass, time, adUnit, formatId] : [trafficClass, time, adUnit, formatId, second]
        }
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
    func tableName(_ grain: ProjectionGrain) -> String {
        let stem = switch self {
        case .format: "format"
        case .asset: "asset"
        case .source: "source"
        case .ivt: "ivt"
        }
        return "\(stem)_\(grain.suffix)"
    }

    var dimensionColumns: [String] {
        switch self {
        case .format: ["ad_unit", "format_id"]
        case .asset: ["ad_unit", "format_id", "asset_key"]
        case .source: ["ad_unit", "format_id", "adapter"]
        case .ivt: ["ad_unit", "format_id", "label"]
        }
    }

    /// The key arrays' rows (`$1…` as in `upsertSQL`) matched with the table's rows as `t`.
    private func keyMatch(_ grain: ProjectionGrain, ordinality: Bool = false) -> (from: String, match: String) {
        let dims = dimensionColumns
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
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
    /// them (1-based) and its counts.
    private func readCountsSQL() -> String {
        let (from, match) = keyMatch(.quarters, ordinality: true)
        return "SELECT u.o::int8, t.counts FROM \(from) JOIN \(tableName(.quarters)) AS t ON \(match)"
    }

    /// An upsert over unnest'ed arrays, from the fixed column lists above (identifiers, never
    /// values): by day `INSERT … ON CONFLICT DO UPDATE SET m = m + excluded.m`, each measure a
    /// parameter; in the quarters grain the rows' new counts whole (one bytea parameter).
    private func upsertSQL(_ grain: ProjectionGrain) -> String {
        let dims = dimensionColumns
        let measures = grain == .day ? measureColumns : ["counts"]
        let columns = ["traffic_class", grain.column] + dims + measures
        let key = [grain.column] + dims + ["traffic_class"]
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
        let element = grain == .day ? "int8" : "bytea"
        for i in 0..<measures.count { arrays.append("$\(3 + dims.count + i)::\(element)[]") }
        let aliases = (0..<columns.count).map { "c\($0)" }
        let select = ["c0::smallint", grain.value("c1")] + aliases[2...]
        let update = switch grain {
        case .day: measures.map { "\($0) = t.\($0) + excluded.\($0)" }
        case .quarters: ["counts = excluded.counts"]
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

extension ProjectionKey {
    /// The value of the table's third key column (asset key, adapter or label), if it has one.
    func secondDimension(_ table: ProjectionTable) -> String? {
        switch table {
        case .format: nil
        case .asset: assetKey
        case .source: adapter
        case .ivt: label
        }
    }
}

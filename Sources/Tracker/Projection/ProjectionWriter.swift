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

/// A quarters row covers 48 UTC quarter hours (half a day), each measure an array of their 49
/// running counts.
enum QuarterBlock {
    static let quarters: Int32 = 48
    static let counts = Int(quarters) + 1
}

/// Adds signed row changes to the projection tables, one statement per table and grain.
///
/// A row whose measures all return to zero is deleted, so the incrementally maintained
/// tables hold exactly the rows a rebuild writes (it writes only non-zero rows).
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

    /// The quarter-hour changes as running-count changes of their half-day rows: for each row
    /// and measure, element k + 1 changes by the sum of the changes of its quarter hours before k.
    private static func writeQuarters(_ quarters: [ProjectionKey: Measures], _ table: ProjectionTable, on connection: Connection) throws {
        var blocks: [ProjectionKey: [Measures]] = [:]
        for (key, values) in quarters {
            var blockKey = key
            let (block, offset) = Self.block(of: key.quarterHour)
            blockKey.quarterHour = QuarterHour(index: block * QuarterBlock.quarters)
            blocks[blockKey, default: Array(repeating: Measures(), count: Int(QuarterBlock.quarters))][Int(offset)] &+= values
        }
        let width = table.statements(.quarters).width
        let rows = blocks.filter { $0.value.contains { $0 != Measures() } }
        guard !rows.isEmpty else { return }
        var keys = KeyColumns(capacity: rows.count)
        var measures = (0..<width).map { _ in BinaryArray(.int8, capacity: rows.count * QuarterBlock.counts) }
        var emptied = false
        for (key, perQuarter) in rows {
            keys.append(key, time: Int64(key.quarterHour.index / QuarterBlock.quarters), table: table)
            var running = Measures()
            for m in 0..<width { measures[m].append(Int64(0)) }
            for values in perQuarter {
                running &+= values
                for m in 0..<width { measures[m].append(running[m]) }
            }
            emptied = emptied || running.min() < 0
        }
        // Its counts are never negative, so a row whose half-day totals are all 0 holds nothing.
        try upsert(keys, measures, table, .quarters, mayEmpty: emptied, on: connection)
    }

    /// The half day (since the epoch) a quarter hour belongs to, and its place in it.
    static func block(of quarter: QuarterHour) -> (block: Int32, offset: Int32) {
        let (q, r) = quarter.index.quotientAndRemainder(dividingBy: QuarterBlock.quarters)
        return r < 0 ? (q - 1, r + QuarterBlock.quarters) : (q, r)
    }

    /// Upserts `rows` (key, day since the epoch, measures) into one table's day rows.
    private static func writeDays(_ rows: [(key: ProjectionKey, time: Int32, values: Measures)], _ table: ProjectionTable,
                                  on connection: Connection) throws {
        let width = table.statements(.day).width
        var keys = KeyColumns(capacity: rows.count)
        var measures = (0..<width).map { _ in BinaryArray(.int8, capacity: rows.count) }
        for (key, t, values) in rows {
            keys.append(key, time: Int64(t), table: table)
            for m in 0..<width { measures[m].append(values[m]) }
        }
        try upsert(keys, measures, table, .day, mayEmpty: rows.contains { $0.values.min() < 0 }, on: connection)
    }

    /// One upsert of a table's rows in one grain; only a subtraction can empty a row, so the
    /// empty ones are looked for only when `mayEmpty`.
    private static func upsert(_ keys: KeyColumns, _ measures: [BinaryArray], _ table: ProjectionTable, _ grain: ProjectionGrain,
                               mayEmpty: Bool, on connection: Connection) throws {
        let statements = table.statements(grain)
        let keyParameters = keys.parameters(table).map(\.parameter)
        try connection.query(statements.upsert, keyParameters + measures.map(\.parameter))
        if mayEmpty { try connection.query(statements.deleteEmpty, keyParameters) }
    }

    /// The key columns of the rows one statement writes, in the statements' order: traffic
    /// class, time (the grain's column), ad unit, format and, but for the format table, the
    /// table's second dimension.
    private struct KeyColumns {
        var trafficClass: BinaryArray, time: BinaryArray, adUnit: BinaryArray, formatId: BinaryArray, second: BinaryArray

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

    /// Deletes the rows named by the key arrays (`$1…` as in `upsertSQL`) whose measures are all zero.
    private func deleteEmptySQL(_ grain: ProjectionGrain) -> String {
        let dims = dimensionColumns
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
        var match = ["t.traffic_class = u.c0", "t.\(grain.column) = \(grain.value("u.c1"))"]
        for (i, d) in dims.enumerated() { match.append("t.\(d) = u.c\(2 + i)") }
        switch grain {
        case .day: match += measureColumns.map { "t.\($0) = 0" }
        case .quarters: match += measureColumns.map { "t.\($0)[\(QuarterBlock.counts)] = 0" }
        }
        return """
            DELETE FROM \(tableName(grain)) AS t
            USING unnest(\(arrays.joined(separator: ", "))) AS u(\((0..<arrays.count).map { "c\($0)" }.joined(separator: ", ")))
            WHERE \(match.joined(separator: " AND "))
            """
    }

    /// `INSERT … ON CONFLICT DO UPDATE SET m = m + excluded.m` over unnest'ed arrays, from the
    /// fixed column lists above (identifiers, never values). In the quarters grain each measure
    /// parameter holds 49 running counts per row, one row after the other; an unchanged measure
    /// (all 0) is left as it is.
    private func upsertSQL(_ grain: ProjectionGrain) -> String {
        let dims = dimensionColumns
        let measures = measureColumns
        let columns = ["traffic_class", grain.column] + dims + measures
        let key = [grain.column] + dims + ["traffic_class"]
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
        switch grain {
        case .day:
            for i in 0..<measures.count { arrays.append("$\(3 + dims.count + i)::int8[]") }
            let aliases = (0..<columns.count).map { "c\($0)" }
            let select = ["c0::smallint", grain.value("c1")] + aliases[2...]
            return """
                INSERT INTO \(tableName(grain)) AS t (\(columns.joined(separator: ", ")))
                SELECT \(select.joined(separator: ", "))
                FROM unnest(\(arrays.joined(separator: ", "))) AS u(\(aliases.joined(separator: ", ")))
                ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE SET
                \(measures.map { "\($0) = t.\($0) + excluded.\($0)" }.joined(separator: ", "))
                """
        case .quarters:
            let n = QuarterBlock.counts
            let aliases = (0..<(2 + dims.count)).map { "c\($0)" }
            let slices = (0..<measures.count).map { i in "($\(3 + dims.count + i)::int8[])[(u.o - 1) * \(n) + 1 : u.o * \(n)]" }
            let select = ["c0::smallint", grain.value("c1")] + aliases[2...] + slices
            let zero = "'{" + Array(repeating: "0", count: n).joined(separator: ",") + "}'::int8[]"
            return """
                INSERT INTO \(tableName(grain)) AS t (\(columns.joined(separator: ", ")))
                SELECT \(select.joined(separator: ", "))
                FROM unnest(\(arrays.joined(separator: ", "))) WITH ORDINALITY AS u(\(aliases.joined(separator: ", ")), o)
                ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE SET
                \(measures.map { "\($0) = CASE WHEN excluded.\($0) = \(zero) THEN t.\($0) ELSE tracker_add_counts(t.\($0), excluded.\($0)) END" }.joined(separator: ",\n"))
                """
        }
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

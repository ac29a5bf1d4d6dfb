/// Adds signed row changes to the projection tables, one statement per table.
///
/// A row whose measures all return to zero is deleted, so the incrementally maintained
/// tables hold exactly the rows a rebuild writes (it writes only non-zero rows).
enum ProjectionWriter {
    static func apply(_ delta: Contribution, on connection: Connection) throws {
        for table in ProjectionTable.allCases {
            let rows = delta.rows.filter { $0.key.table == table }
            guard !rows.isEmpty else { continue }
            let statements = table.statements
            let width = statements.width
            var trafficClass = BinaryArray(.int8, capacity: rows.count)
            var day = BinaryArray(.int8, capacity: rows.count)
            var adUnit = BinaryArray(.text, capacity: rows.count)
            var formatId = BinaryArray(.text, capacity: rows.count)
            var second = BinaryArray(.text, capacity: rows.count)
            var measures = (0..<width).map { _ in BinaryArray(.int8, capacity: rows.count) }
            for (key, values) in rows {
                trafficClass.append(Int64(key.trafficClass.rawValue))
                day.append(Int64(key.day.daysSinceEpoch))
                adUnit.append(key.adUnit)
                formatId.append(key.formatId)
                switch table {
                case .format: break
                case .asset: second.append(key.assetKey)
                case .source: second.append(key.adapter)
                }
                for m in 0..<width { measures[m].append(values[m]) }
            }
            var parameters = [trafficClass, day, adUnit, formatId]
            if table != .format { parameters.append(second) }
            parameters += measures
            try connection.query(statements.upsert, parameters.map(\.parameter))
            // Only a subtraction can empty a row.
            if rows.contains(where: { $0.value.min() < 0 }) {
                try connection.query(statements.deleteEmpty, parameters.prefix(table == .format ? 4 : 5).map(\.parameter))
            }
        }
    }
}

extension ProjectionTable {
    /// The table's two statements and its number of measures, built once (every projector step uses them).
    var statements: (upsert: String, deleteEmpty: String, width: Int) { Self.built[self]! }

    private static let built = Dictionary(uniqueKeysWithValues: allCases.map { table in
        (table, (upsert: table.upsertSQL, deleteEmpty: table.deleteEmptySQL, width: table.measureColumns.count))
    })

    var tableName: String {
        switch self {
        case .format: "format_day"
        case .asset: "asset_day"
        case .source: "source_day"
        }
    }

    var dimensionColumns: [String] {
        switch self {
        case .format: ["ad_unit", "format_id"]
        case .asset: ["ad_unit", "format_id", "asset_key"]
        case .source: ["ad_unit", "format_id", "adapter"]
        }
    }

    /// Deletes the rows named by the key arrays (`$1…` as in `upsertSQL`) whose measures are all zero.
    private var deleteEmptySQL: String {
        let dims = dimensionColumns
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
        var match = ["t.traffic_class = u.c0", "t.day = date '1970-01-01' + u.c1::int"]
        for (i, d) in dims.enumerated() { match.append("t.\(d) = u.c\(2 + i)") }
        match += measureColumns.map { "t.\($0) = 0" }
        return """
            DELETE FROM \(tableName) AS t
            USING unnest(\(arrays.joined(separator: ", "))) AS u(\((0..<arrays.count).map { "c\($0)" }.joined(separator: ", ")))
            WHERE \(match.joined(separator: " AND "))
            """
    }

    /// `INSERT … ON CONFLICT DO UPDATE SET m = m + excluded.m` over unnest'ed arrays, from the
    /// fixed column lists above (identifiers, never values).
    private var upsertSQL: String {
        let dims = dimensionColumns
        let measures = measureColumns
        let columns = ["traffic_class", "day"] + dims + measures
        var arrays = ["$1::int8[]", "$2::int8[]"]
        for i in 0..<dims.count { arrays.append("$\(3 + i)::text[]") }
        for i in 0..<measures.count { arrays.append("$\(3 + dims.count + i)::int8[]") }
        let aliases = (0..<columns.count).map { "c\($0)" }
        var select = ["c0::smallint", "date '1970-01-01' + c1::int"]
        select += aliases[2...].map { $0 }
        let key = ["day"] + dims + ["traffic_class"]
        return """
            INSERT INTO \(tableName) AS t (\(columns.joined(separator: ", ")))
            SELECT \(select.joined(separator: ", "))
            FROM unnest(\(arrays.joined(separator: ", "))) AS u(\(aliases.joined(separator: ", ")))
            ON CONFLICT (\(key.joined(separator: ", "))) DO UPDATE SET
            \(measures.map { "\($0) = t.\($0) + excluded.\($0)" }.joined(separator: ", "))
            """
    }
}

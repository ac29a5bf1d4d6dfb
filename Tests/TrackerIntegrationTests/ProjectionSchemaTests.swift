import Testing
@testable import Tracker

/// The measure catalogue (`FormatMeasure`, `AssetMeasure`, `SourceMeasure`) is what the
/// projector writes and the reports read: it must name exactly the migrated tables' columns in
/// the day tables (a count each), and the measures in a quarters table's `counts` (named in order
/// by the column's comment, the order their running counts are interleaved in).
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"))
struct ProjectionSchemaTests {
    @Test(arguments: ProjectionTable.allCases, ProjectionGrain.allCases)
    func theCatalogueNamesEveryColumnOfTheTableInOrder(_ table: ProjectionTable, _ grain: ProjectionGrain) async throws {
        try await withTestDatabase { db in
            func columns(_ condition: String) async throws -> String? {
                try await db.scalar("""
                    SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = $1 AND \(condition)
                    """, [table.tableName(grain)])
            }
            let keys = (["traffic_class", grain.column] + table.dimensionColumns).joined(separator: ",")
            switch grain {
            case .day:
                #expect(try await columns("data_type = 'bigint'") == table.measureColumns.joined(separator: ","), "the measures of \(table.tableName(grain))")
                #expect(try await columns("data_type <> 'bigint'") == keys, "the keys of \(table.tableName(grain))")
            case .quarters:
                #expect(try await columns("true") == keys + ",mask,counts" + (table.keepsTotalsInline ? ",totals" : ""),
                        "the columns of \(table.tableName(grain))")
                let measures = try await db.scalar("SELECT col_description($1::regclass, attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'counts'",
                                                   [table.tableName(grain)])
                #expect(measures == table.measureColumns.joined(separator: ","), "the measures in \(table.tableName(grain)).counts")
                let storage = try await db.scalar("SELECT attstorage::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'counts'",
                                                  [table.tableName(grain)])
                #expect(storage == "e", "\(table.tableName(grain)).counts is stored uncompressed")
                if table.keepsTotalsInline {
                    // The generated totals are the last element of counts: as wide as the catalogue's measures.
                    let width = table.measureColumns.count * 8
                    let totals = try await db.scalar("""
                        SELECT pg_get_expr(d.adbin, d.adrelid) || ' ' || a.attstorage::text FROM pg_attrdef d
                        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                        WHERE d.adrelid = $1::regclass AND a.attname = 'totals'
                        """, [table.tableName(grain)]) ?? ""
                    #expect(totals.contains("octet_length(counts) - \(width - 1)") && totals.contains("\(width))") && totals.hasSuffix(" p"),
                            "\(table.tableName(grain)).totals: \(totals)")
                }
                let options = try await db.scalar("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = $1::regclass",
                                                  [table.tableName(grain)])
                #expect(options == "toast_tuple_target=8160", "\(table.tableName(grain)) keeps its key texts in the row")
            }
        }
    }

    /// Projections made before the counts were one sparse bytea per row (migrations 13 and 14)
    /// keep every running count: each measure's 49 arrays elements are read back from the bytes
    /// where the reports and the projector look for them.
    @Test(arguments: [ProjectionTable.format, .asset, .source, .ivt])
    func migrationsThirteenAndFourteenKeepEveryRunningCount(_ table: ProjectionTable) async throws {
        try await withTestDatabase(migrations: Migration.all.filter { $0.version < 13 }) { db in
            let measures = table.measureColumns
            // Element k + 1 of measure m: distinct for every pair, 0 first, growing, and one past 2^32.
            func element(_ m: Int, _ k: Int) -> Int64 { k == 0 ? 0 : Int64(m + 1) << 33 + Int64(k * (m + 7)) }
            let arrays = measures.indices.map { m in "'{" + (0..<QuarterBlock.counts).map { String(element(m, $0)) }.joined(separator: ",") + "}'" }
            let keys = ["0", "timestamptz '2026-11-01 12:00:00+00'"] + table.dimensionColumns.map { "'\($0) value'" }
            try await db.pool.withConnection { connection in
                try connection.execute("""
                    INSERT INTO \(table.tableName(.quarters)) (traffic_class, quarters_from, \(table.dimensionColumns.joined(separator: ", ")),
                                                            \(measures.joined(separator: ", ")))
                    VALUES (\((keys + arrays).joined(separator: ", ")))
                    """)
            }
            _ = try await Migrator(logger: TestEnvironment.logger).migrate(db.pool)
            let counts: [Int64] = try await db.pool.withConnection { connection in
                let r = try connection.query("SELECT mask, counts FROM \(table.tableName(.quarters))", [], binaryResults: true)
                try #require(r.rowCount == 1)
                let mask = UInt64(bitPattern: try #require(ByteReader.int64(r.bytes(0, 0))))
                try #require(QuarterBlock.fits(mask: mask, counts: r.bytes(0, 1).count, width: measures.count))
                var values = [Int64](repeating: 0, count: QuarterBlock.counts * measures.count)
                QuarterBlock.expand(mask: mask, counts: r.bytes(0, 1), width: measures.count, into: &values)
                return values
            }
            for m in measures.indices {
                let read = (0..<QuarterBlock.counts).map { counts[$0 * measures.count + m] }
                #expect(read == (0..<QuarterBlock.counts).map { element(m, $0) }, "\(measures[m])")
            }
        }
    }
}

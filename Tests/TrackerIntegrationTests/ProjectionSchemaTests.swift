import Testing
@testable import Tracker

/// The measure catalogue (`FormatMeasure`, `AssetMeasure`, `SourceMeasure`) is what the
/// projector writes and the reports read: it must name exactly the migrated tables' columns,
/// in the day tables (counts) and the quarters tables (arrays of running counts) alike.
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
            let measureType = grain == .day ? "bigint" : "ARRAY"
            let measures = try await columns("data_type = '\(measureType)'")
            let keys = try await columns("data_type <> '\(measureType)'")
            #expect(measures == table.measureColumns.joined(separator: ","), "the measures of \(table.tableName(grain))")
            #expect(keys == (["traffic_class", grain.column] + table.dimensionColumns).joined(separator: ","), "the keys of \(table.tableName(grain))")
        }
    }
}

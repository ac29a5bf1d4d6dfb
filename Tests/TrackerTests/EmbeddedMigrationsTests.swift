import Foundation
import Testing
import Tracker

struct EmbeddedMigrationsTests {
    /// The binary carries sql/ as it is in the repository: scripts/embed-migrations.sh was run.
    @Test func embeddedMigrationsEqualTheFilesOfSqlFolder() throws {
        let sqlDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("sql")
        let files = try FileManager.default.contentsOfDirectory(atPath: sqlDir.path)
            .filter { $0.range(of: #"^\d{3}_.+\.sql$"#, options: .regularExpression) != nil }
            .sorted()
        #expect(files.count == Migration.all.count, "run scripts/embed-migrations.sh")
        for (file, migration) in zip(files, Migration.all) {
            let text = try String(contentsOf: sqlDir.appendingPathComponent(file), encoding: .utf8)
            #expect(file == String(format: "%03d_%@.sql", migration.version, migration.name))
            #expect(text.trimmingCharacters(in: .newlines) == migration.sql.trimmingCharacters(in: .newlines), "\(file) differs from the embedded copy: run scripts/embed-migrations.sh")
        }
    }

    @Test func embeddedCitusFilesEqualTheirFiles() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("sql/citus")
        for (name, migration) in [("distribute.sql", Migration.citusLayout), ("coordinator-order.sql", Migration.citusCoordinatorOrder),
                                  ("retention.sql", Migration.citusRetention)] {
            let text = try String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8)
            #expect(text.trimmingCharacters(in: .newlines) == migration.sql.trimmingCharacters(in: .newlines),
                    "sql/citus/\(name) differs from the embedded copy: run scripts/embed-migrations.sh")
        }
    }

    @Test func versionsAreUniqueAndIncreasing() {
        let versions = Migration.all.map(\.version)
        #expect(versions == versions.sorted())
        #expect(Set(versions).count == versions.count)
    }
}

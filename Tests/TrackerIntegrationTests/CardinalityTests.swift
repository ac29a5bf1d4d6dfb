import Foundation
import Testing
import Tracker

/// Distinct ad units, formats, asset keys and adapters: the projections written in bounded
/// parts give what they give written whole, and the dimension budget refuses what passes it.
@Suite(.enabled(if: TestEnvironment.isAvailable, "needs scripts/test.sh"), .serialized)
struct CardinalityTests {
    /// The projector writing every few rows, and a rebuild spilling every few rows over many
    /// files, give the reference reports and each other's tables row for row.
    @Test(arguments: [(UInt64(7), 1), (UInt64(8), 3), (UInt64(9), 40)])
    func projectionsWrittenInSmallPartsGiveTheReferenceReportsAndEqualARebuild(seed: UInt64, rowsPerWrite: Int) async throws {
        try await withTestDatabase { db in
            var g = SeededGenerator(seed: seed)
            let events = RandomTraffic.events(ads: 150, using: &g)
            let projector = Projector(pool: db.pool, attributionWindow: .seconds(3600), batchSize: Int.random(in: 20...90, using: &g),
                                      rowsPerWrite: rowsPerWrite, logger: TestEnvironment.logger)
            for chunk in RandomTraffic.deliveries(of: events, chunks: 4, using: &g) {
                try await db.append(chunk)
                for _ in 0..<Int.random(in: 0...2, using: &g) { try await projector.step() }
            }
            try await projector.catchUp()
            let expected = ReferenceReports.csv(events)
            #expect(try await db.reportsAsCSV() == expected, "seed \(seed), \(rowsPerWrite) rows per write, incremental")
            let incremental = try await db.projectionSnapshot()

            try await Rebuild(pool: db.pool, eventsPerFile: 60, rowsPerWrite: rowsPerWrite, rowsInMemory: 5 * rowsPerWrite,
                              logger: TestEnvironment.logger).run()
            let rebuilt = try await db.projectionSnapshot()
            for (table, rows) in incremental {
                #expect(rebuilt[table] == rows, "\(table) after a rebuild writing \(rowsPerWrite) rows at a time")
            }
            #expect(try await db.reportsAsCSV() == expected)
        }
    }

    /// Past TRACKER_MAX_ASSET_KEYS_PER_DAY, a click bringing a new asset key is rejected naming
    /// the field and the setting; the rest of its batch, and later clicks on asset keys the key
    /// already sent, are stored; another key has its own budget.
    @Test func aKeyPastItsAssetKeysOfTheDayHasNewOnesRejectedAndTheRestStored() async throws {
        try await withTestDatabase { db in
            let app = try await db.createKey("app", scope: .ingest)
            let other = try await db.createKey("other-app", scope: .ingest)
            try await withInProcessTracker(db, environment: ["TRACKER_MAX_ASSET_KEYS_PER_DAY": "3"]) { tracker in
                let clicks = (0..<5).map { i in Wire.event(type: "click", requestId: "ad-\(i)", assetKey: "key-\(i)") }
                let first = try await tracker.postEvents(Wire.batch(clicks), key: app)
                #expect(first.status == 200 && first.json["accepted"] as? Int == 3, "\(first.text)")
                let rejected = try #require(first.json["rejected"] as? [[String: Any]])
                #expect(rejected.map { $0["index"] as? Int } == [3, 4])
                let message = rejected.first?["error"] as? String ?? ""
                #expect(message.hasPrefix("assetKey: ") && message.contains("TRACKER_MAX_ASSET_KEYS_PER_DAY") && message.contains("3 distinct asset keys"),
                        "\(message)")

                let again = [Wire.event(type: "click", requestId: "ad-9", assetKey: "key-1"), Wire.event(type: "click", requestId: "ad-10", assetKey: "key-7")]
                let second = try await tracker.postEvents(Wire.batch(again), key: app)
                #expect(second.json["accepted"] as? Int == 1 && (second.json["rejected"] as? [[String: Any]])?.first?["index"] as? Int == 1,
                        "an asset key already sent today is stored: \(second.text)")
                let elsewhere = try await tracker.postEvents(Wire.batch([Wire.event(type: "click", requestId: "ad-20", assetKey: "key-7")]), key: other)
                #expect(elsewhere.json["accepted"] as? Int == 1, "each key has its own budget: \(elsewhere.text)")
            }
            #expect(try await db.scalar("SELECT count(*) FROM events") == "5")
            #expect(try await db.scalar("SELECT count(DISTINCT asset_key) FROM events WHERE key_name = 'app'") == "3")
        }
    }
}

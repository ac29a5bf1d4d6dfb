import ArgumentParser
import Foundation
import Testing
import Tracker
@testable import TrackerServer

/// The ceiling on distinct ad units, formats, asset keys and adapters per key and UTC day, and
/// the per-key rate limit a `tracker serve` has without being told.
struct DimensionBudgetTests {
    static let noon = Timestamp(microseconds: 1_790_000_000_000_000 / 86_400_000_000 * 86_400_000_000 + 43_200_000_000)

    /// The clicks as a decoded batch received at `at`, click i on `adUnits[i]` and `assetKeys[i]`.
    static func clicks(_ assetKeys: [String], adUnits: [String]? = nil, at receivedAt: Timestamp = noon) throws -> DecodedBatch {
        let events = assetKeys.enumerated().map { i, asset -> [String: Any] in
            ["id": UUID().uuidString.lowercased(), "type": "click", "requestId": "ad-\(i)", "adUnit": adUnits?[i] ?? "/6499/app/native",
             "formatId": "10063170", "assetKey": asset, "occurredAt": "2026-01-01T00:00:00Z"]
        }
        let body = try JSONSerialization.data(withJSONObject: ["events": events])
        let batch = try BatchDecoder().decode(Array(body), receivedAt: receivedAt)
        #expect(batch.rejected.isEmpty, "the fixture's events are valid: \(batch.rejected)")
        return batch
    }

    static func budget(_ perDay: [DimensionBudget.Dimension: Int]) -> DimensionBudget {
        DimensionBudget(limits: DimensionBudget.Limits(perDay: perDay))
    }

    @Test func pastItsLimitAKeysEventsBringingNewValuesAreRejectedNamingTheFieldAndSetting() throws {
        let budget = Self.budget([.assetKey: 2])
        var batch = try Self.clicks(["a", "b", "a", "c", "b", "d"])
        budget.admit(&batch, key: "app", receivedAt: Self.noon)
        #expect(batch.accepted.map(\.index) == [0, 1, 2, 4], "values already sent today pass after the limit")
        #expect(batch.rejected.map(\.index) == [3, 5])
        #expect(batch.rejected.allSatisfy { $0.reason == "dimension_budget" })
        let message = try #require(batch.rejected.first?.error)
        #expect(message.hasPrefix("assetKey: the key 'app' has brought 2 distinct asset keys today (UTC)"), "\(message)")
        #expect(message.contains("TRACKER_MAX_ASSET_KEYS_PER_DAY"))
    }

    @Test func aRejectedEventCountsNoneOfItsValues() throws {
        let budget = Self.budget([.adUnit: 2, .assetKey: 1])
        var first = try Self.clicks(["a", "b"], adUnits: ["/1/x", "/1/y"])
        budget.admit(&first, key: "app", receivedAt: Self.noon)
        #expect(first.accepted.map(\.index) == [0], "b is a second asset key")
        var second = try Self.clicks(["a"], adUnits: ["/1/z"])
        budget.admit(&second, key: "app", receivedAt: Self.noon)
        #expect(second.accepted.map(\.index) == [0], "the rejected click's ad unit /1/y was not counted: /1/x and /1/z fit")
    }

    @Test func anEventSharingTheLastOnesValueIsStillCheckedForItsOthers() throws {
        // An event whose ad unit the batch has just brought still has each of its other values checked.
        let budget = Self.budget([.adUnit: 2, .assetKey: 1])
        var batch = try Self.clicks(["a", "b", "a", "a", "a"], adUnits: ["/1/x", "/1/x", "/1/y", "/1/x", "/1/z"])
        budget.admit(&batch, key: "app", receivedAt: Self.noon)
        #expect(batch.accepted.map(\.index) == [0, 2, 3], "b is a second asset key on the same ad unit; /1/z a third ad unit")
        #expect(batch.rejected.map(\.error).map { $0.prefix(9) } == ["assetKey:", "adUnit: t"])
    }

    @Test func eachKeyAndEachUTCDayHasABudgetOfItsOwn() throws {
        let budget = Self.budget([.assetKey: 1])
        var app = try Self.clicks(["a", "b"])
        budget.admit(&app, key: "app", receivedAt: Self.noon)
        var other = try Self.clicks(["b"])
        budget.admit(&other, key: "other", receivedAt: Self.noon)
        #expect(app.accepted.count == 1 && other.accepted.count == 1)
        let nextDay = Self.noon + .seconds(12 * 3600)
        var tomorrow = try Self.clicks(["b"], at: nextDay)
        budget.admit(&tomorrow, key: "app", receivedAt: nextDay)
        #expect(tomorrow.accepted.count == 1, "a new UTC day starts afresh")
    }

    @Test func valuesAreToldApartByTheirBytesAsTheReportsTellThemApart() throws {
        let budget = Self.budget([.assetKey: 1])
        var batch = try Self.clicks(["\u{e9}", "e\u{301}"])
        budget.admit(&batch, key: "app", receivedAt: Self.noon)
        #expect(batch.accepted.count == 1, "é precomposed and e + combining acute are two asset keys, two report rows")
    }

    // MARK: The settings

    static func resolve(_ values: [String: String]) throws -> ServeConfiguration {
        try ServeConfiguration(settings: Settings(["DATABASE_URL": "postgresql://db/tracker"].merging(values) { $1 }), descriptorLimit: 65_536)
    }

    @Test func serveHasADefaultRateLimitAndDimensionLimitsEachOfWhichOffTurnsOff() throws {
        let defaults = try Self.resolve([:])
        #expect(defaults.rateLimit == ServeDefaults.rateLimit && ServeDefaults.rateLimit == 200_000)
        #expect(defaults.dimensionLimits == .defaults)
        #expect(defaults.dimensionLimits.perDay == [.adUnit: 10_000, .formatId: 1_000, .assetKey: 2_000, .adapter: 500])
        let set = try Self.resolve(["TRACKER_RATE_LIMIT": "off", "TRACKER_MAX_ASSET_KEYS_PER_DAY": "50", "TRACKER_MAX_ADAPTERS_PER_DAY": "OFF"])
        #expect(set.rateLimit == nil)
        #expect(set.dimensionLimits.perDay == [.adUnit: 10_000, .formatId: 1_000, .assetKey: 50])
    }

    @Test(arguments: ["TRACKER_RATE_LIMIT", "TRACKER_MAX_AD_UNITS_PER_DAY", "TRACKER_MAX_FORMATS_PER_DAY"])
    func aLimitThatIsNeitherAPositiveIntegerNorOffStopsServe(name: String) {
        #expect { try Self.resolve([name: "0"]) } throws: {
            ($0 as? ValidationError)?.message == "\(name) must be a positive integer or off, got '0'"
        }
    }

    /// The default limit: a second of 200 000 events, then the key waits out its debt.
    @Test func theDefaultRateLimitHoldsAKeyPastASecondOfItsEvents() {
        let limiter = RateLimiter(eventsPerSecond: ServeDefaults.rateLimit)
        #expect(limiter.reserve(key: "app", events: 600_000) == nil, "a full bucket lets a burst through, into debt")
        let wait = limiter.reserve(key: "app", events: 1)
        #expect(wait.map { (2...3).contains($0) } == true, "400 000 events of debt at 200 000/s: \(String(describing: wait))")
        #expect(limiter.reserve(key: "other", events: 500) == nil, "one key's burst is not another's")
    }
}

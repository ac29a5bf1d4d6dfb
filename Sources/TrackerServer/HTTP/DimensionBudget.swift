import Metrics
import Synchronization
import Tracker

/// A ceiling on the distinct values each ingest key may bring per UTC day of receipt, for each
/// dimension the projections are keyed by: ad units, formats, asset keys, adapters.
///
/// Every distinct value is a row of the projection tables for each day and half day it has
/// events in, and the key that sends them ships inside an app: whoever unpacks the app holds it,
/// and an app with a bug can put an id where a name belongs. Past a limit, an event that brings
/// a value its key has not sent that day is rejected (in `rejected`, naming the field and the
/// setting), and the rest of its batch is stored; an event whose values the key already sent
/// that day is stored as always. Rejected events are counted in
/// `tracker_dimension_budget_refused_events_total`, never stored, never projected.
///
/// Each process counts what it receives: behind a balancer that spreads a key's batches over N
/// nodes, a key can bring up to N times a limit (each node meeting other values); a restart
/// starts the day's counts afresh. Values are kept as 64-bit hashes under a per-process seed,
/// about 10 bytes each, so a key at every default limit holds about 150 KiB.
final class DimensionBudget: Sendable {
    /// A dimension the budget counts, named as the event's field.
    enum Dimension: String, CaseIterable, Sendable {
        case adUnit, formatId, assetKey, adapter

        /// The setting of its limit.
        var setting: String {
            switch self {
            case .adUnit: "TRACKER_MAX_AD_UNITS_PER_DAY"
            case .formatId: "TRACKER_MAX_FORMATS_PER_DAY"
            case .assetKey: "TRACKER_MAX_ASSET_KEYS_PER_DAY"
            case .adapter: "TRACKER_MAX_ADAPTERS_PER_DAY"
            }
        }

        /// What it counts, in a message.
        var plural: String {
            switch self {
            case .adUnit: "ad units"
            case .formatId: "formats"
            case .assetKey: "asset keys"
            case .adapter: "adapters"
            }
        }

        /// The event's value of the dimension, `nil` when it has none (`""` counts as a value).
        func value(of event: TrackingEvent) -> String? {
            switch self {
            case .adUnit: event.adUnit
            case .formatId: event.formatId
            case .assetKey: event.assetKey
            case .adapter: event.adapter
            }
        }
    }

    /// The distinct values per key and UTC day for each dimension; `nil` turns a dimension's
    /// limit off.
    struct Limits: Sendable, Equatable {
        var perDay: [Dimension: Int]

        /// Far above what an app sends: an app has tens of ad units and formats, an ad network
        /// tens of adapters, a custom format a handful of asset keys; a platform sending for
        /// many apps through one server key raises them.
        static let defaults = Limits(perDay: [.adUnit: 10_000, .formatId: 1_000, .assetKey: 2_000, .adapter: 500])
        static let off = Limits(perDay: [:])
    }

    let limits: Limits
    private let state = Mutex<[String: KeyDay]>([:])
    private let refused: [Dimension: Counter]
    /// The most distinct values any key has brought today, per dimension (this process).
    private let largest: [Dimension: Gauge]

    /// One key's values of one UTC day, by dimension.
    private struct KeyDay {
        var day: Day
        var seen: [Dimension: Set<Int>] = [:]
    }

    init(limits: Limits) {
        self.limits = limits
        refused = Dictionary(uniqueKeysWithValues: Dimension.allCases.map {
            ($0, Counter(label: "tracker_dimension_budget_refused_events_total", dimensions: [("dimension", $0.rawValue)]))
        })
        largest = Dictionary(uniqueKeysWithValues: Dimension.allCases.map {
            ($0, Gauge(label: "tracker_dimension_budget_values", dimensions: [("dimension", $0.rawValue)]))
        })
        for (dimension, limit) in limits.perDay {
            Gauge(label: "tracker_dimension_budget_limit", dimensions: [("dimension", dimension.rawValue)]).record(limit)
        }
    }

    /// Moves the accepted events of `batch` that bring a value past a limit of `key` to its
    /// rejections (in index order), and counts the values of the others.
    func admit(_ batch: inout DecodedBatch, key: String, receivedAt: Timestamp) {
        guard !limits.perDay.isEmpty, !batch.accepted.isEmpty else { return }
        let day = receivedAt.day
        var kept: [(index: Int, event: TrackingEvent)] = []
        kept.reserveCapacity(batch.accepted.count)
        var rejections: [(Rejection, Dimension)] = []
        var counts: [Dimension: Int] = [:]
        state.withLock { keys in
            var current = keys[key] ?? KeyDay(day: day)
            if current.day != day {
                // A new day for this key: yesterday's values of every key are forgotten with it.
                keys = keys.filter { $0.value.day >= day }
                current = KeyDay(day: day)
            }
            for accepted in batch.accepted {
                if let over = admit(accepted.event, into: &current) {
                    rejections.append((Rejection(index: accepted.index, id: accepted.event.id.text, error: message(over, key: key),
                                                 reason: "dimension_budget"), over))
                } else {
                    kept.append(accepted)
                }
            }
            keys[key] = current
            for dimension in limits.perDay.keys {
                counts[dimension] = keys.values.lazy.filter { $0.day == day }.map { $0.seen[dimension]?.count ?? 0 }.max() ?? 0
            }
        }
        for (dimension, count) in counts { largest[dimension]?.record(count) }
        guard !rejections.isEmpty else { return }
        for (_, dimension) in rejections { refused[dimension]?.increment() }
        batch.accepted = kept
        batch.rejected = (batch.rejected + rejections.map(\.0)).sorted { $0.index < $1.index }
    }

    /// The dimension whose limit `event` would pass, or `nil` after counting its values.
    private func admit(_ event: TrackingEvent, into current: inout KeyDay) -> Dimension? {
        var new: [(Dimension, Int)] = []
        for dimension in Dimension.allCases {
            guard let limit = limits.perDay[dimension], let value = dimension.value(of: event) else { continue }
            let hash = Self.hash(value)
            let seen = current.seen[dimension] ?? []
            if seen.contains(hash) { continue }
            if seen.count >= limit { return dimension }
            new.append((dimension, hash))
        }
        for (dimension, hash) in new { current.seen[dimension, default: []].insert(hash) }
        return nil
    }

    /// By the value's bytes, as the projections tell values apart (`ProjectionKey`).
    private static func hash(_ value: String) -> Int {
        var hasher = Hasher()
        var value = value
        value.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        return hasher.finalize()
    }

    private func message(_ dimension: Dimension, key: String) -> String {
        "\(dimension.rawValue): the key '\(key)' has brought \(limits.perDay[dimension] ?? 0) distinct \(dimension.plural) today (UTC), "
            + "its limit per day (\(dimension.setting)); events with \(dimension.plural) it already sent today are still stored. "
            + "A value that changes with every ad (an id where a name belongs) is a bug in the app"
    }
}

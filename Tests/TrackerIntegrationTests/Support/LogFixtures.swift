import Foundation
import Tracker

/// Validated events built directly, as the ingest route would hand them to the log.
enum Events {
    /// 2026-11-10 00:00 UTC: the first day of the tests' traffic.
    static let day0 = Day(year: 2026, month: 11, day: 10)!

    static func id() -> PackedUUID { PackedUUID(UUID().uuidString)! }

    /// An event that happened at `at` (its corrected time); received now, so it lands in a
    /// partition that exists.
    static func make(_ type: EventType, ad requestId: String, at: Timestamp, id: PackedUUID = Events.id(),
                     adUnit: String = "/1234/home/native", formatId: String = "10063170", asset: String? = nil,
                     source: EventSource = .app, adapter: String? = nil, eea: Bool = false, reservation: Bool = false,
                     test: Bool = false, loadId: String? = nil, latencyMs: Int? = nil) -> TrackingEvent {
        TrackingEvent(id: id, type: type, requestId: requestId, adUnit: adUnit, formatId: formatId,
                      assetKey: type == .click ? (asset ?? "MainImage") : asset, source: source, adapter: adapter,
                      eea: eea, reservation: reservation, test: test, occurredAt: at, receivedAt: Timestamp.now(),
                      correctedAt: at, loadId: loadId, latencyMs: latencyMs)
    }

    /// An event of load `loadId` (PROTOCOL.md 10: `ad_request`, `ad_failed` or `mediation_result`).
    static func load(_ type: EventType, _ loadId: String, at: Timestamp, id: PackedUUID = Events.id(),
                     adUnit: String = "/1234/home/native", formatId: String = "", adsRequested: Int? = nil,
                     latencyMs: Int? = nil, errorCode: AdErrorCode? = nil, result: MediationResult? = nil, adapter: String? = nil,
                     position: Int? = nil, test: Bool = false) -> TrackingEvent {
        TrackingEvent(id: id, type: type, requestId: nil, adUnit: adUnit, formatId: formatId,
                      source: type == .mediationResult ? .mediation : .app, adapter: adapter, test: test, occurredAt: at,
                      receivedAt: Timestamp.now(), correctedAt: at, loadId: loadId,
                      adsRequested: type == .adRequest ? (adsRequested ?? 1) : nil, latencyMs: latencyMs, errorCode: errorCode,
                      result: result, position: position)
    }

    /// `day0` + `days` at hh:mm:ss (plus `micros`).
    static func at(day days: Int = 0, _ h: Int, _ m: Int = 0, _ s: Int = 0, micros: Int64 = 0) -> Timestamp {
        day0.adding(days: days).start + .seconds(h * 3600 + m * 60 + s) + .microseconds(micros)
    }
}

extension TestDatabase {
    /// Appends through the real group-commit log (started for the call, then drained), as
    /// sent with the key `keyName` (`beacon:…` for events fetched as beacons).
    func append(_ events: [TrackingEvent], keyName: String = "tests") async throws {
        // No append deadline: fixtures load thousands of events on a machine the whole suite loads.
        var configuration = EventLog.Configuration()
        configuration.appendTimeout = nil
        let log = EventLog(pool: pool, configuration: configuration, logger: TestEnvironment.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await log.run() }
            // The log's writers wait without regard to cancellation: stop them on every path, or a
            // failed append would leave the group waiting for run() for ever (a run hung so).
            do {
                var start = 0
                while start < events.count {
                    let chunk = Array(events[start..<min(start + 500, events.count)])
                    _ = try await log.append(chunk, keyName: keyName)
                    start += chunk.count
                }
            } catch {
                log.stop()
                throw error
            }
            log.stop()
            try await group.waitForAll()
        }
    }

    func projector(batchSize: Int = 20_000, window: Duration = .seconds(3600)) -> Projector {
        Projector(pool: pool, attributionWindow: window, batchSize: batchSize, logger: TestEnvironment.logger)
    }

    /// Every projection table, row for row, in a fixed order (the state a rebuild must reproduce).
    func projectionSnapshot() async throws -> [String: [[String?]]] {
        var out: [String: [[String?]]] = [:]
        for table in ProjectionTable.allCases {
            for grain in ProjectionGrain.allCases {
                let order = ([grain.column] + table.dimensionColumns + ["traffic_class"]).joined(separator: ", ")
                out[table.tableName(grain)] = try await rows("SELECT * FROM \(table.tableName(grain)) ORDER BY \(order)")
            }
        }
        out["ad_events"] = try await rows("SELECT * FROM ad_events ORDER BY request_id, id, load_reference")
        out["events_projected"] = try await rows("SELECT events_projected FROM projection_state")
        return out
    }

    /// Each report as CSV, with and without test traffic, over `days` days from `Events.day0 - 1`
    /// (or from `from`), in `timeZone`, by day or by hour.
    func reportsAsCSV(days: Int = 8, from: Day = Events.day0.adding(days: -1), timeZone: String = "UTC",
                      granularity: ReportGranularity = .day) async throws -> [String: String] {
        var out: [String: String] = [:]
        let reports = Reports(pool: pool)
        for kind in ReportKind.allCases {
            for includeTest in [false, true] {
                let q = try ReportQuery(kind: kind, from: from, to: from.adding(days: days - 1),
                                        includeTest: includeTest, timeZone: timeZone, granularity: granularity)
                out["\(kind.rawValue) includeTest=\(includeTest)"] = try await reports.run(q).csv
            }
        }
        return out
    }
}

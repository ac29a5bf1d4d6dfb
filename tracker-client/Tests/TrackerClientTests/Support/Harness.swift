import Foundation
import Testing
@testable import TrackerClient

/// A tracker on a fresh queue folder, a scripted server and a manual clock.
struct Harness {
    let folder: URL
    let clock: ManualClock
    let server: ScriptedServer
    let configuration: AdTracker.Configuration

    /// `random` is the backoff's jitter draw (0: the shortest wait, half the exponential one).
    init(folder: URL? = nil, clock: ManualClock = ManualClock(), _ configure: (inout AdTracker.Configuration) -> Void = { _ in }) {
        self.folder = folder ?? FileManager.default.temporaryDirectory.appendingPathComponent("tracker-client-\(UUID().uuidString)")
        self.clock = clock
        server = ScriptedServer()
        var c = AdTracker.Configuration(endpoint: URL(string: "http://127.0.0.1:9")!, ingestKey: "trk_test", queueDirectory: self.folder)
        c.syncInterval = nil
        configure(&c)
        configuration = c
    }

    /// A tracker over the harness's folder (a new one reads back what an earlier one left).
    func open(random: @escaping @Sendable () -> Double = { 0 }) throws -> AdTracker {
        try AdTracker(configuration: configuration, transport: server, clock: clock, random: random)
    }

    func removeFolder() {
        try? FileManager.default.removeItem(at: folder)
    }
}

/// Runs `body` with a tracker whose delivery task runs, then stops it and removes the folder.
func withDelivery(_ harness: Harness, random: @escaping @Sendable () -> Double = { 0 },
                  _ body: (AdTracker) async throws -> Void) async throws {
    let tracker = try harness.open(random: random)
    let delivery = Task { await tracker.run() }
    do {
        try await body(tracker)
    } catch {
        delivery.cancel()
        await delivery.value
        harness.removeFolder()
        throw error
    }
    delivery.cancel()
    await delivery.value
    harness.removeFolder()
}

extension AdTracker {
    /// An ad on a test-free unit with custom format 10063170.
    func testAd(_ requestId: String = "req-\(UUID().uuidString.prefix(8))", source: EventSource = .app) -> TrackedAd {
        ad(requestId: requestId, adUnit: "/1234/home/native", format: .custom(formatID: "10063170"), source: source)
    }

    /// Records `count` impressions of one ad; their ids as the wire writes them.
    func recordImpressions(_ count: Int) -> [String] {
        let ad = testAd()
        return (0..<count).map { _ in ad.recordImpression().uuidString.lowercased() }
    }
}

/// Reads notices in order, skipping those the test does not look for.
struct NoticeReader {
    var iterator: AsyncStream<AdTracker.Notice>.Iterator

    init(_ tracker: AdTracker) {
        iterator = tracker.notices.makeAsyncIterator()
    }

    /// The next notice `match` accepts (returns non-nil for).
    mutating func next<T>(_ match: (AdTracker.Notice) -> T?) async -> T? {
        while let notice = await iterator.next() {
            if let value = match(notice) { return value }
        }
        return nil
    }
}

import Foundation
import Testing
@testable import TrackerClient

/// The on-disk queue: what survives a crash, what a damaged file costs, and the limits.
/// A "crash" is a tracker released without its delivery task ever stopping cleanly.
@Suite struct QueueTests {
    @Test func eventsRecordedBeforeACrashAreDeliveredAfterReopening() async throws {
        let harness = Harness { $0.flushAt = 100 }
        var ids: [String] = []
        do {
            let crashed = try harness.open()
            ids = crashed.recordImpressions(10)
        }
        try await withDelivery(harness) { tracker in
            #expect(tracker.statistics.recovered == 10)
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == ids, "the same events, ids and order")
            request.accept()
            #expect(await outcome == .delivered)
        }
    }

    @Test func deliveredEventsAreNotSentAgainAfterReopening() async throws {
        let harness = Harness { $0.flushAt = 5 }
        var later: [String] = []
        do {
            let tracker = try harness.open()
            let delivery = Task { await tracker.run() }
            _ = tracker.recordImpressions(5)
            await harness.server.next().accept()
            #expect(await tracker.flush() == .delivered)
            later = tracker.recordImpressions(3)
            delivery.cancel()
            await delivery.value
        }
        let reopened = try harness.open()
        #expect(reopened.statistics.recovered == 3)
        let delivery = Task { await reopened.run() }
        async let outcome = reopened.flush()
        let request = await harness.server.next()
        #expect(request.batch.ids == later)
        request.accept()
        #expect(await outcome == .delivered)
        delivery.cancel()
        await delivery.value
        harness.removeFolder()
    }

    @Test func aLostCursorOnlySendsDeliveredEventsAgainNeverLosesOne() async throws {
        let harness = Harness { $0.flushAt = 4 }
        var ids: [String] = []
        do {
            let tracker = try harness.open()
            let delivery = Task { await tracker.run() }
            ids = tracker.recordImpressions(4)
            await harness.server.next().accept()
            #expect(await tracker.flush() == .delivered)
            ids += tracker.recordImpressions(2)
            delivery.cancel()
            await delivery.value
        }
        // A power loss can lose the cursor file (it is not synced): the queue starts over at
        // the oldest file it still has, and the server counts the repeats as duplicates.
        try FileManager.default.removeItem(at: harness.folder.appendingPathComponent("cursor"))
        try await withDelivery(harness) { reopened in
            #expect(reopened.statistics.recovered == 6)
            async let outcome = reopened.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == ids)
            request.accept(duplicates: 4)
            #expect(await outcome == .delivered)
            #expect(reopened.statistics.duplicates == 4)
        }
    }

    @Test func aTornRecordAtTheEndIsCutOffAndTheRecordsBeforeItKept() async throws {
        let harness = Harness { $0.flushAt = 100 }
        var ids: [String] = []
        do {
            ids = try harness.open().recordImpressions(5)
        }
        let segment = try segmentFiles(harness.folder).last!
        let size = try fileSize(segment)
        try truncate(segment, to: size - 10)
        let reopened = try harness.open()
        var notices = NoticeReader(reopened)
        #expect(reopened.statistics.recovered == 4)
        let damaged = await notices.next { notice -> Int? in
            if case .damagedQueueData(let bytes) = notice { return bytes }
            return nil
        }
        #expect(damaged == size / 5 - 10, "the torn record's bytes")
        let delivery = Task { await reopened.run() }
        async let outcome = reopened.flush()
        let request = await harness.server.next()
        #expect(request.batch.ids == Array(ids[0..<4]))
        request.accept()
        #expect(await outcome == .delivered)
        delivery.cancel()
        await delivery.value
        harness.removeFolder()
    }

    @Test func aDamagedRecordCostsOnlyTheRestOfItsFile() async throws {
        // Three records per segment file: the records are all the same size.
        let probe = Harness()
        do { _ = try probe.open().recordImpressions(1) }
        let frame = try fileSize(try segmentFiles(probe.folder)[0])
        probe.removeFolder()

        let harness = Harness {
            $0.flushAt = 100
            $0.segmentBytes = 3 * frame
        }
        var ids: [String] = []
        do { ids = try harness.open().recordImpressions(9) }
        let segments = try segmentFiles(harness.folder)
        #expect(segments.count == 3)
        // One bit flipped in the JSON of the middle file's first record (the 4th event).
        try flipByte(segments[1], at: QueueFiles.headerBytes + 20)
        let reopened = try harness.open()
        #expect(reopened.statistics.recovered == 6)
        let delivery = Task { await reopened.run() }
        async let outcome = reopened.flush()
        let request = await harness.server.next()
        #expect(request.batch.ids == Array(ids[0..<3]) + Array(ids[6..<9]), "the files before and after the damage are whole")
        request.accept()
        #expect(await outcome == .delivered)
        delivery.cancel()
        await delivery.value
        harness.removeFolder()
    }

    @Test func pastMaxEventsTheOldestAreDroppedAndCounted() async throws {
        let harness = Harness {
            $0.flushAt = 100
            $0.queueLimits = AdTracker.QueueLimits(maxEvents: 5, maxBytes: 1 << 20, maxAge: .seconds(86_400))
        }
        try await withDelivery(harness) { tracker in
            var notices = NoticeReader(tracker)
            let ids = tracker.recordImpressions(8)
            #expect(tracker.statistics.pending == 5)
            #expect(tracker.statistics.dropped == [.eventLimit: 3])
            var announced = 0
            while announced < 3, let count = await notices.next({ notice -> Int? in
                if case .dropped(let count, .eventLimit) = notice { return count }
                return nil
            }) {
                announced += count
            }
            #expect(announced == 3)
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == Array(ids[3..<8]), "the newest five")
            request.accept()
            #expect(await outcome == .delivered)
        }
    }

    @Test func pastMaxBytesTheOldestAreDropped() async throws {
        let probe = Harness()
        do { _ = try probe.open().recordImpressions(1) }
        let frame = try fileSize(try segmentFiles(probe.folder)[0])
        probe.removeFolder()

        let harness = Harness {
            $0.flushAt = 100
            $0.queueLimits = AdTracker.QueueLimits(maxEvents: 1000, maxBytes: 3 * frame, maxAge: .seconds(86_400))
        }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(7)
            #expect(tracker.statistics.pending == 3)
            #expect(tracker.statistics.pendingBytes == 3 * frame)
            #expect(tracker.statistics.dropped == [.byteLimit: 4])
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == Array(ids[4..<7]))
            request.accept()
            #expect(await outcome == .delivered)
        }
    }

    @Test func eventsOlderThanMaxAgeAreDroppedUnsent() async throws {
        let harness = Harness {
            $0.flushAt = 100
            $0.queueLimits = AdTracker.QueueLimits(maxEvents: 1000, maxBytes: 1 << 20, maxAge: .seconds(3600))
        }
        do { _ = try harness.open().recordImpressions(2) }
        // The device stays offline (and the app closed) for two hours.
        harness.clock.setWall(byAdding: .seconds(7200))
        try await withDelivery(harness) { tracker in
            #expect(tracker.statistics.recovered == 2)
            #expect(tracker.statistics.dropped == [.tooOld: 2])
            #expect(tracker.statistics.pending == 0)
            let fresh = tracker.recordImpressions(1)
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == fresh)
            request.accept()
            #expect(await outcome == .delivered)
        }
    }

    @Test func eventsInFlightAreNotDroppedAndTheLimitHoldsAgainWhenTheyReturn() async throws {
        let harness = Harness {
            $0.flushAt = 4
            $0.queueLimits = AdTracker.QueueLimits(maxEvents: 4, maxBytes: 1 << 20, maxAge: .seconds(86_400))
        }
        try await withDelivery(harness) { tracker in
            let first = tracker.recordImpressions(4)
            let request = await harness.server.next()
            #expect(request.batch.ids == first)
            let more = tracker.recordImpressions(3)
            #expect(tracker.statistics.pending == 7, "the batch on the wire is not dropped under it")
            request.refuse(503, error: "overloaded", message: "retry")
            harness.clock.advance(by: await harness.clock.nextSleep())
            let retry = await harness.server.next()
            #expect(tracker.statistics.dropped == [.eventLimit: 3])
            #expect(retry.batch.ids == [first[3]] + more, "back within the limit: the oldest three went")
            retry.accept()
        }
    }

    @Test func deliveredFilesAreRemoved() async throws {
        let harness = Harness {
            $0.flushAt = 10
            $0.segmentBytes = 1024
        }
        try await withDelivery(harness) { tracker in
            for _ in 0..<3 {
                _ = tracker.recordImpressions(10)
                await harness.server.next().accept()
                #expect(await tracker.flush() == .delivered)
            }
            let segments = try segmentFiles(harness.folder)
            #expect(segments.count <= 1, "only the file being written remains: \(segments)")
        }
    }

    @Test func aQueueFolderIsCreatedWithItsParents() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-client-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let harness = Harness(folder: root.appendingPathComponent("Library/Application Support/TrackerQueue"))
        let tracker = try harness.open()
        _ = tracker.recordImpressions(2)
        #expect(tracker.statistics.pendingInMemory == 0, "on disk, not in memory")
        #expect(try segmentFiles(harness.folder).count == 1)
    }

    @Test func aSecondTrackerOnTheSameFolderIsRefused() throws {
        let harness = Harness()
        let first = try harness.open()
        #expect(throws: AdTracker.OpenError.queueInUse(path: harness.folder.path)) { try harness.open() }
        _ = first
        harness.removeFolder()
    }

    @Test func anEventOverTheServersSizeLimitIsRejectedAtOnceAndNotQueued() async throws {
        let harness = Harness()
        let tracker = try harness.open()
        var notices = NoticeReader(tracker)
        let ad = tracker.testAd()
        let id = ad.recordImpression(attributes: ["note": .string(String(repeating: "x", count: 17 * 1024))])
        let rejected = await notices.next { notice -> AdTracker.RejectedEvent? in
            if case .rejected(let event) = notice { return event }
            return nil
        }
        #expect(rejected?.id == id)
        #expect(rejected?.status == 0)
        #expect(rejected?.message.contains("at most 16384 bytes per event") == true)
        #expect(tracker.statistics.pending == 0)
        #expect(tracker.statistics.rejected == 1)
        harness.removeFolder()
    }
}

// MARK: - Files

func segmentFiles(_ folder: URL) throws -> [URL] {
    try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
        .filter { $0.pathExtension == "seg" }
        .sorted { $0.lastPathComponent < $1.lastPathComponent }
}

func fileSize(_ url: URL) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue ?? 0
}

func truncate(_ url: URL, to size: Int) throws {
    let handle = try FileHandle(forWritingTo: url)
    try handle.truncate(atOffset: UInt64(size))
    try handle.close()
}

func flipByte(_ url: URL, at offset: Int) throws {
    var bytes = [UInt8](try Data(contentsOf: url))
    bytes[offset] ^= 0x01
    try Data(bytes).write(to: url)
}

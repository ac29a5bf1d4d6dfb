import Foundation
import Testing
@testable import TrackerClient

/// The queue on a real full file system: a 64 KiB tmpfs mounted for the test (root).
@Suite(.serialized) struct FullDiskTests {
    @Test func aFullDiskNeitherLosesEventsWhileRunningNorDamagesTheQueue() async throws {
        let disk = try TmpfsMount(kibibytes: 64)
        defer { disk.unmount() }
        let harness = Harness(folder: disk.path.appendingPathComponent("queue")) {
            $0.flushAt = 100_000
            $0.segmentBytes = 16 * 1024
        }

        // 1. Recording far past the disk's size: no crash, nothing lost, storage failure told once.
        var ids: [String] = []
        var persisted = 0
        do {
            let tracker = try harness.open()
            var notices = NoticeReader(tracker)
            ids = tracker.recordImpressions(1000)
            let statistics = tracker.statistics
            #expect(statistics.pending == 1000)
            #expect(statistics.pendingInMemory > 500, "64 KiB holds about 200 of the 1000 events")
            persisted = statistics.pending - statistics.pendingInMemory
            let failing = await notices.next { notice -> Int32? in
                if case .storageFailing(let code) = notice { return code }
                return nil
            }
            #expect(failing == ENOSPC)
        }

        // 2. Killed while the disk is full: what was written reads back whole, in order.
        try await withDeliveryKeepingFolder(harness) { tracker in
            #expect(tracker.statistics.recovered == persisted)
            #expect(tracker.statistics.damagedBytes == 0, "the writes that failed were cut off, none torn")
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == Array(ids[0..<persisted]), "every persisted event, once, in order")
            request.accept()
            #expect(await outcome == .delivered)

            // 3. Delivered files are removed, so the disk takes events again.
            _ = tracker.recordImpressions(3)
            #expect(tracker.statistics.pendingInMemory == 0)
        }

        // 4. And while running, the events that only fit in memory are delivered too. The
        // delivery task of step 2 has ended, but the runtime may free its captured tracker (and
        // so the queue folder's lock) a moment after `delivery.value` returned, on the thread
        // that ran it: wait for the lock rather than fail on that race (seen once under load).
        var opened: AdTracker?
        for _ in 0..<100 where opened == nil {
            do {
                opened = try harness.open()
            } catch AdTracker.OpenError.queueInUse {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let full = try #require(opened, "the queue folder was still locked 2 s after its tracker's delivery ended")
        #expect(full.statistics.recovered == 3)
        let more = full.recordImpressions(600)
        #expect(full.statistics.pendingInMemory > 0)
        let delivery = Task { await full.run() }
        async let outcome = full.flush()
        var sent: [String] = []
        while sent.count < 603 {
            let request = await harness.server.next()
            sent += request.batch.ids
            request.accept()
        }
        #expect(await outcome == .delivered)
        #expect(sent.count == 603)
        #expect(Array(sent.suffix(600)) == more, "memory and file events in recording order")
        delivery.cancel()
        await delivery.value
    }
}

/// `withDelivery` without removing the folder (it is on the test's tmpfs).
func withDeliveryKeepingFolder(_ harness: Harness, _ body: (AdTracker) async throws -> Void) async throws {
    let tracker = try harness.open()
    let delivery = Task { await tracker.run() }
    defer { delivery.cancel() }
    try await body(tracker)
    delivery.cancel()
    await delivery.value
}

/// A small tmpfs, so the test meets a real ENOSPC (and the partial writes before it).
struct TmpfsMount {
    let path: URL

    init(kibibytes: Int) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("tracker-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: path, withIntermediateDirectories: true)
        let status = Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(kibibytes)k", "tmpfs", path.path])
        try #require(status == 0, "mounting a \(kibibytes) KiB tmpfs failed (status \(status)): the full-disk test needs root (mount -t tmpfs); run the tests as root")
    }

    func unmount() {
        _ = Self.run("/bin/umount", [path.path])
        try? FileManager.default.removeItem(at: path)
    }

    private static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        do {
            try process.run()
        } catch {
            return -1
        }
        process.waitUntilExit()
        return process.terminationStatus
    }
}

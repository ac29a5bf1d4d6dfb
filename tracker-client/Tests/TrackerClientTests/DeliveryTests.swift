import Foundation
import Testing
@testable import TrackerClient

/// Batching, retries and what each answer of the server does, against a scripted server and
/// a clock the test moves: no test sleeps.
@Suite struct DeliveryTests {
    @Test func aBatchGoesAsSoonAsFlushAtEventsWait() async throws {
        let harness = Harness { $0.flushAt = 5 }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(5)
            let request = await harness.server.next()
            #expect(request.batch.ids == ids)
            #expect(harness.clock.monotonic() == .zero, "no time had to pass")
            request.accept()
            #expect(await tracker.flush() == .delivered)
            #expect(tracker.statistics.accepted == 5)
            #expect(tracker.statistics.pending == 0)
        }
    }

    @Test func fewerEventsWaitForTheFlushInterval() async throws {
        let harness = Harness {
            $0.flushAt = 100
            $0.flushInterval = .seconds(10)
        }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(3)
            #expect(await harness.clock.nextSleep() == .seconds(10), "the oldest event is due 10 s after it was recorded")
            #expect(harness.server.requestCount == 0)
            harness.clock.advance(by: .seconds(9))
            #expect(harness.server.requestCount == 0)
            harness.clock.advance(by: .seconds(1))
            let request = await harness.server.next()
            #expect(request.batch.ids == ids)
            request.accept()
        }
    }

    @Test func flushSendsAtOnceWithoutWaitingForTheInterval() async throws {
        let harness = Harness { $0.flushAt = 100 }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(2)
            async let outcome = tracker.flush()
            let request = await harness.server.next()
            #expect(request.batch.ids == ids)
            request.accept()
            #expect(await outcome == .delivered)
        }
    }

    @Test func everyCallIsSentEvenTheSameImpressionTwice() async throws {
        let harness = Harness { $0.flushAt = 2 }
        try await withDelivery(harness) { tracker in
            let ad = tracker.testAd("req-7f3c")
            ad.recordImpression()
            ad.recordImpression()
            let request = await harness.server.next()
            #expect(request.batch.ids.count == 2)
            #expect(Set(request.batch.ids).count == 2, "each call is its own event with its own id")
            request.accept()
        }
    }

    @Test func aRetrySendsTheSameIdsWithAFreshSentAt() async throws {
        let harness = Harness { $0.flushAt = 3 }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(3)
            let first = await harness.server.next()
            first.refuse(503, error: "database_unavailable", message: "the database is unavailable", retryAfter: "2")
            let wake = await harness.clock.nextSleep()
            harness.clock.advance(by: wake)
            let second = await harness.server.next()
            #expect(second.batch.ids == ids, "the same events, the same ids")
            #expect(first.batch.sentAt == "2026-11-20T10:00:00.000000Z")
            #expect(second.batch.sentAt == "2026-11-20T10:00:02.000000Z", "sentAt is the clock of this attempt")
            #expect(second.batch.events.map { $0.contains("\"occurredAt\":\"2026-11-20T10:00:00.000000Z\"") } == [true, true, true],
                    "occurredAt does not change")
            second.accept()
            #expect(await tracker.flush() == .delivered)
            #expect(tracker.statistics.requests == 2)
            #expect(tracker.statistics.retries == 1)
        }
    }

    @Test func retryAfterIsAFloorUnderTheBackoff() async throws {
        let harness = Harness { $0.flushAt = 1 }
        try await withDelivery(harness) { tracker in
            var notices = NoticeReader(tracker)
            _ = tracker.recordImpressions(1)
            await harness.server.next().refuse(429, error: "rate_limited", message: "over the limit", retryAfter: "30")
            let retry = await notices.next { notice -> Duration? in
                if case .retrying(let after, .status(429, error: "rate_limited", message: _)) = notice { return after }
                return nil
            }
            #expect(retry == .seconds(30), "the first backoff (0.5 s) is shorter than Retry-After: 30")
            #expect(await harness.clock.nextSleep() == .seconds(30))
            harness.clock.advance(by: .seconds(29))
            #expect(harness.server.requestCount == 1, "nothing before Retry-After")
            harness.clock.advance(by: .seconds(1))
            await harness.server.next().accept()
        }
    }

    @Test func backoffDoublesAfterEachFailureUpToTheMaximumAndNeverGivesUp() async throws {
        let harness = Harness {
            $0.flushAt = 1
            $0.backoff = AdTracker.Backoff(initial: .seconds(1), maximum: .seconds(8))
        }
        // Jitter draw 0: each wait is half of the exponential value.
        try await withDelivery(harness, random: { 0 }) { tracker in
            let ids = tracker.recordImpressions(1)
            var waits: [Duration] = []
            for _ in 0..<12 {
                await harness.server.next().fail()
                let wake = await harness.clock.nextSleep()
                waits.append(wake - harness.clock.monotonic())
                harness.clock.advance(by: wake - harness.clock.monotonic())
            }
            #expect(waits == [.milliseconds(500), .seconds(1), .seconds(2), .seconds(4)] + Array(repeating: .seconds(4), count: 8))
            let last = await harness.server.next()
            #expect(last.batch.ids == ids, "the 13th attempt still carries the event")
            last.accept()
            #expect(await tracker.flush() == .delivered)
            #expect(tracker.statistics.dropped.isEmpty)
        }
    }

    @Test func jitterSpreadsTheWaitBetweenHalfAndAllOfTheExponentialValue() {
        let backoff = AdTracker.Backoff(initial: .seconds(1), maximum: .seconds(300))
        #expect(backoff.delay(afterFailures: 3, retryAfter: nil, random: 0) == .seconds(2))
        #expect(backoff.delay(afterFailures: 3, retryAfter: nil, random: 0.5) == .seconds(3))
        #expect(backoff.delay(afterFailures: 3, retryAfter: nil, random: 1) == .seconds(4))
        #expect(backoff.delay(afterFailures: 40, retryAfter: nil, random: 1) == .seconds(300))
        #expect(backoff.delay(afterFailures: 1, retryAfter: .seconds(7200), random: 0) == .seconds(3600),
                "a Retry-After past maxRetryAfter is capped")
    }

    @Test func retryAfterIsReadAsSecondsOrAsAnHTTPDate() {
        let now = Verdict.httpDateMicros("Fri, 20 Nov 2026 10:00:00 GMT")!
        #expect(now == 1_795_168_800_000_000)
        #expect(Verdict.retryAfter("120", wallMicros: now) == .seconds(120))
        #expect(Verdict.retryAfter("Fri, 20 Nov 2026 10:00:45 GMT", wallMicros: now) == .seconds(45))
        #expect(Verdict.retryAfter("Fri, 20 Nov 2026 09:00:00 GMT", wallMicros: now) == .zero)
        #expect(Verdict.retryAfter("soon", wallMicros: now) == nil)
        #expect(Verdict.retryAfter(nil, wallMicros: now) == nil)
    }

    @Test func a413HalvesTheBatchUntilItFitsThenGrowsBack() async throws {
        let harness = Harness { $0.flushAt = 8 }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(8)
            let whole = await harness.server.next()
            #expect(whole.batch.ids == ids)
            whole.refuse(413, error: "payload_too_large", message: "the body is over the proxy's limit")
            let half = await harness.server.next()
            #expect(half.batch.ids == Array(ids[0..<4]))
            half.accept()
            let rest = await harness.server.next()
            #expect(rest.batch.ids == Array(ids[4..<8]))
            rest.accept()
            #expect(await tracker.flush() == .delivered)
            #expect(tracker.statistics.accepted == 8)
            #expect(tracker.statistics.rejected == 0)
            // After successes the batches are whole again.
            let more = tracker.recordImpressions(8)
            let next = await harness.server.next()
            #expect(next.batch.ids == more)
            next.accept()
        }
    }

    @Test func anEventRefusedAloneIsRejectedWithTheServersMessageAndNeverSentAgain() async throws {
        let harness = Harness { $0.flushAt = 4 }
        try await withDelivery(harness) { tracker in
            var notices = NoticeReader(tracker)
            let ids = tracker.recordImpressions(4)
            let poisoned = ids[2]
            // The server refuses any batch that holds the poisoned event with 400.
            var sent: [[String]] = []
            for _ in 0..<5 {
                let request = await harness.server.next()
                sent.append(request.batch.ids)
                if request.batch.ids.contains(poisoned) {
                    request.refuse(400, error: "invalid_body", message: "event 0 is not an object")
                } else {
                    request.accept()
                }
            }
            #expect(await tracker.flush() == .delivered)
            #expect(sent == [ids, [ids[0], ids[1]], [ids[2], ids[3]], [ids[2]], [ids[3]]],
                    "halved around the bad event; the good ones each sent once more at most")
            let rejected = await notices.next { notice -> AdTracker.RejectedEvent? in
                if case .rejected(let event) = notice { return event }
                return nil
            }
            #expect(rejected?.id.uuidString.lowercased() == poisoned)
            #expect(rejected?.status == 400)
            #expect(rejected?.message == "event 0 is not an object")
            #expect(tracker.statistics.accepted == 3)
            #expect(tracker.statistics.rejected == 1)
        }
    }

    @Test func rejectionsInAReceiptAreSurfacedAndNotRetried() async throws {
        let harness = Harness { $0.flushAt = 3 }
        try await withDelivery(harness) { tracker in
            var notices = NoticeReader(tracker)
            let ad = tracker.testAd()
            ad.recordImpression()
            let click = ad.recordClick(onAsset: "", action: .customHandler)
            ad.recordAdChoicesImpression()
            let request = await harness.server.next()
            request.accept(rejected: [(1, "assetKey must be 1 to 64 characters, got an empty string")])
            let rejected = await notices.next { notice -> AdTracker.RejectedEvent? in
                if case .rejected(let event) = notice { return event }
                return nil
            }
            #expect(rejected?.id == click)
            #expect(rejected?.status == 200)
            #expect(rejected?.message == "assetKey must be 1 to 64 characters, got an empty string")
            #expect(rejected?.event.contains("\"assetKey\":\"\"") == true)
            #expect(await tracker.flush() == .delivered)
            #expect(tracker.statistics.accepted == 2)
            #expect(tracker.statistics.rejected == 1)
            #expect(harness.server.requestCount == 1)
        }
    }

    @Test func aRevokedKeyStopsDeliveryWithoutSpinningUntilResume() async throws {
        let harness = Harness { $0.flushAt = 1 }
        try await withDelivery(harness) { tracker in
            var notices = NoticeReader(tracker)
            let ids = tracker.recordImpressions(1)
            await harness.server.next().refuse(401, error: "unauthorized", message: "unknown or revoked key")
            let stop = await notices.next { notice -> AdTracker.StopReason? in
                if case .stopped(let reason) = notice { return reason }
                return nil
            }
            #expect(stop == AdTracker.StopReason(status: 401, error: "unauthorized", message: "unknown or revoked key"))
            #expect(await tracker.flush() == .stopped(stop!))
            let later = tracker.recordImpressions(2)
            harness.clock.advance(by: .seconds(3600))
            #expect(harness.server.requestCount == 1, "no request while stopped, however long")
            #expect(tracker.statistics.pending == 3, "the events stay queued")
            tracker.resume()
            let request = await harness.server.next()
            #expect(request.batch.ids == ids + later)
            request.accept()
        }
    }

    @Test func flushReportsTheNextAttemptWhileTheServerIsDown() async throws {
        let harness = Harness { $0.flushAt = 100 }
        try await withDelivery(harness, random: { 0 }) { tracker in
            _ = tracker.recordImpressions(1)
            async let outcome = tracker.flush()
            await harness.server.next().refuse(503, error: "overloaded", message: "retry after the delay", retryAfter: "1")
            let result = await outcome
            guard case .willRetry(let after, .status(503, error: "overloaded", message: _)) = result else {
                Issue.record("flush should say when the next attempt is")
                return
            }
            #expect(after == .seconds(1))
            #expect(tracker.statistics.pending == 1)
        }
    }

    @Test func anUnparseable200IsRetriedNotTakenForDelivered() async throws {
        let harness = Harness { $0.flushAt = 1 }
        try await withDelivery(harness) { tracker in
            let ids = tracker.recordImpressions(1)
            await harness.server.next().answer(200, body: "<html>Sign in to the Wi-Fi</html>")
            harness.clock.advance(by: await harness.clock.nextSleep())
            let again = await harness.server.next()
            #expect(again.batch.ids == ids)
            again.accept()
        }
    }

    @Test func theBodyIsGzipOfTheEventsInRecordingOrder() async throws {
        let harness = Harness { $0.flushAt = 6 }
        try await withDelivery(harness) { tracker in
            let ad = tracker.ad(requestId: "req-7f3c", adUnit: "/6499/example/native", format: .custom(formatID: "10063170"),
                                eea: true, reservation: true, test: true, source: .mediation, adapter: "ExampleNetwork",
                                attributes: ["appVersion": .string("4.2.0")])
            let ids = [ad.recordImpression(), ad.recordClick(onAsset: "MainImage", action: .deepLink),
                       ad.recordAdChoicesImpression(), ad.recordAdChoicesClick(), ad.recordVideo(.play),
                       ad.recordVideo(.end, source: .sdk)].map { $0.uuidString.lowercased() }
            let request = await harness.server.next()
            #expect(request.batch.ids == ids)
            let click = try #require(try JSONSerialization.jsonObject(with: Data(request.batch.events[1].utf8)) as? [String: Any])
            #expect(click["type"] as? String == "click")
            #expect(click["requestId"] as? String == "req-7f3c")
            #expect(click["adUnit"] as? String == "/6499/example/native")
            #expect(click["formatId"] as? String == "10063170")
            #expect(click["assetKey"] as? String == "MainImage")
            #expect(click["clickAction"] as? String == "deep_link")
            #expect(click["source"] as? String == "mediation")
            #expect(click["adapter"] as? String == "ExampleNetwork")
            #expect(click["eea"] as? Bool == true)
            #expect(click["reservation"] as? Bool == true)
            #expect(click["test"] as? Bool == true)
            #expect((click["attributes"] as? [String: Any])?["appVersion"] as? String == "4.2.0")
            let types = request.batch.events.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["type"] as? String }
            #expect(types == ["impression", "click", "adchoices_impression", "adchoices_click", "video_play", "video_end"])
            #expect(request.batch.events[5].contains("\"source\":\"sdk\""), "a call's source wins over the ad's")
            request.accept()
        }
    }

    @Test func flushDeliversByItselfWhenRunIsNotRunning() async throws {
        let harness = Harness { $0.flushAt = 100 }
        let tracker = try harness.open()
        let ids = tracker.recordImpressions(3)
        async let outcome = tracker.flush()
        let request = await harness.server.next()
        #expect(request.batch.ids == ids)
        request.accept()
        #expect(await outcome == .delivered)
        #expect(tracker.statistics.pending == 0)
        harness.removeFolder()
    }

    @Test func runTakesOverFromAFlushThatIsDelivering() async throws {
        let harness = Harness { $0.flushAt = 100 }
        let tracker = try harness.open()
        let first = tracker.recordImpressions(2)
        async let outcome = tracker.flush()
        let request = await harness.server.next()
        let delivery = Task { await tracker.run() }
        request.accept()
        #expect(await outcome == .delivered)
        #expect(request.batch.ids == first)
        // run() delivers from now on: the next events go at flushInterval without a flush.
        let later = tracker.recordImpressions(1)
        harness.clock.advance(by: await harness.clock.nextSleep())
        let next = await harness.server.next()
        #expect(next.batch.ids == later)
        next.accept()
        delivery.cancel()
        await delivery.value
        harness.removeFolder()
    }

    @Test func writesAreForcedToStorageEverySyncIntervalEvenWhileDeliveryWaits() async throws {
        let harness = Harness {
            $0.flushAt = 100
            $0.flushInterval = .seconds(10)
            $0.syncInterval = .seconds(1)
        }
        try await withDelivery(harness) { tracker in
            _ = tracker.recordImpressions(1)
            #expect(tracker.queue.hasUnsyncedWrites)
            #expect(await harness.clock.nextSleep() == .seconds(1), "the sync comes before the 10 s flush")
            harness.clock.advance(by: .seconds(1))
            #expect(await harness.clock.nextSleep() == .seconds(10))
            #expect(!tracker.queue.hasUnsyncedWrites)
            harness.clock.advance(by: .seconds(9))
            await harness.server.next().refuse(503, error: "overloaded", message: "retry", retryAfter: "60")
            _ = tracker.recordImpressions(1)
            #expect(await harness.clock.nextSleep() == .seconds(11), "during a 60 s backoff the new write is synced within 1 s")
            harness.clock.advance(by: .seconds(1))
            #expect(await harness.clock.nextSleep() == .seconds(70))
            #expect(!tracker.queue.hasUnsyncedWrites)
        }
    }

    @Test func flushWithoutRunWaitsOutTheBackoffThenSendsAgain() async throws {
        let harness = Harness { $0.flushAt = 100 }
        let tracker = try harness.open()
        let ids = tracker.recordImpressions(2)
        async let first = tracker.flush()
        await harness.server.next().refuse(429, error: "rate_limited", message: "slow down", retryAfter: "5")
        #expect(await first == .willRetry(after: .seconds(5), reason: .status(429, error: "rate_limited", message: "slow down")))
        harness.clock.advance(by: .seconds(4))
        #expect(await tracker.flush() == .willRetry(after: .seconds(1), reason: .status(429, error: "rate_limited", message: "slow down")),
                "a flush does not cut Retry-After short")
        #expect(harness.server.requestCount == 1)
        harness.clock.advance(by: .seconds(1))
        async let second = tracker.flush()
        let request = await harness.server.next()
        #expect(request.batch.ids == ids)
        request.accept()
        #expect(await second == .delivered)
        harness.removeFolder()
    }
}

import Foundation
import Testing
@testable import TrackerClient

/// The calls an app makes along a load (the protocol's section 10): each writes the event the
/// server expects, with the latency measured on the monotonic clock from the load's start (or
/// from the network's own start, for a mediation answer).
@Suite struct FunnelTests {
    private func object(_ event: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(event.utf8)) as? [String: Any])
    }

    @Test func aLoadRecordsItsRequestItsAdsAndItsWaterfallWithLatencies() async throws {
        let harness = Harness { $0.flushAt = 5 }
        try await withDelivery(harness) { tracker in
            let load = tracker.loadStarted(loadId: "load-1", adUnit: "/1234/home/native", format: .custom(formatID: "10063170"),
                                           adsRequested: 2)
            let network = load.mediationStarted(adapter: "ExampleNetwork", position: 1)
            harness.clock.advance(by: .milliseconds(120))
            network.failed(.mediationNoFill)
            let second = load.mediationStarted(adapter: "OtherNetwork", position: 2)
            harness.clock.advance(by: .milliseconds(80))
            second.loaded()
            let ad = load.adLoaded(requestId: "req-1", format: .custom(formatID: "10063170"))
            ad.recordImpression()
            let request = await harness.server.next()
            let events = try request.batch.events.map(object)
            #expect(events.map { $0["type"] as? String } == ["ad_request", "mediation_result", "mediation_result", "ad_loaded", "impression"])

            let adRequest = events[0]
            #expect(adRequest["loadId"] as? String == "load-1")
            #expect(adRequest["requestId"] == nil, "a load has no ad yet")
            #expect(adRequest["adsRequested"] as? Int == 2)
            #expect(adRequest["formatId"] as? String == "10063170")
            #expect(adRequest["latencyMs"] == nil)

            #expect(events[1]["result"] as? String == "failed")
            #expect(events[1]["errorCode"] as? String == "mediation_no_fill")
            #expect(events[1]["adapter"] as? String == "ExampleNetwork")
            #expect(events[1]["position"] as? Int == 1)
            #expect(events[1]["latencyMs"] as? Int == 120)
            #expect(events[1]["source"] as? String == "mediation")
            #expect(events[2]["result"] as? String == "loaded")
            #expect(events[2]["latencyMs"] as? Int == 80, "from that network's own load call")

            let loaded = events[3]
            #expect(loaded["requestId"] as? String == "req-1")
            #expect(loaded["loadId"] as? String == "load-1")
            #expect(loaded["latencyMs"] as? Int == 200, "from loadRequest:")
            #expect(events[4]["loadId"] == nil, "only ad_loaded names the load")
            request.accept()
        }
    }

    @Test func aFailedLoadRecordsTheSDKsErrorAndItsLatency() async throws {
        let harness = Harness { $0.flushAt = 2 }
        try await withDelivery(harness) { tracker in
            let load = tracker.loadStarted(loadId: "load-2", adUnit: "/1234/home/native")
            harness.clock.advance(by: .seconds(3))
            load.failed(AdErrorCode(gadErrorCode: 1))
            let request = await harness.server.next()
            let failed = try object(request.batch.events[1])
            let adRequest = try object(request.batch.events[0])
            #expect(failed["type"] as? String == "ad_failed")
            #expect(failed["errorCode"] as? String == "no_fill")
            #expect(failed["latencyMs"] as? Int == 3000)
            #expect(adRequest["formatId"] == nil, "no format asked for")
            request.accept()
        }
    }

    @Test func gadErrorCodesMapToTheProtocolsNames() {
        #expect(AdErrorCode(gadErrorCode: 0) == .invalidRequest)
        #expect(AdErrorCode(gadErrorCode: 2) == .networkError)
        #expect(AdErrorCode(gadErrorCode: 5) == .timeout)
        #expect(AdErrorCode(gadErrorCode: 9) == .mediationNoFill)
        #expect(AdErrorCode(gadErrorCode: 20) == .applicationIdentifierMissing)
        #expect(AdErrorCode(gadErrorCode: 999) == .other)
    }

    @Test func aLatencyPastTenMinutesIsKeptWithinTheProtocolsRange() async throws {
        let harness = Harness { $0.flushAt = 2 }
        try await withDelivery(harness) { tracker in
            let load = tracker.loadStarted(adUnit: "/1234/home/native")
            harness.clock.advance(by: .seconds(3600))
            load.failed(.timeout)
            let request = await harness.server.next()
            let failed = try object(request.batch.events[1])
            #expect(failed["latencyMs"] as? Int == 600_000)
            request.accept()
        }
    }
}

import NIOEmbedded
import Testing
import Tracker
@testable import TrackerServer

/// The decisions `QuickAnswers` makes at request heads reach the contexts of those requests:
/// each connection's in the order its requests came, never another connection's, and what a
/// closed connection's requests never took is handed back (their reservations are refunded).
struct FrontDoorDecisionsTests {
    func batch(_ key: String, reserved: Int?) -> AdmittedBatch {
        AdmittedBatch(principal: Principal(name: key, scope: .ingest),
                      head: IngestRoute.BatchHead(gzip: false, wireLimit: 1024, events: reserved ?? 1), reserved: reserved)
    }

    @Test func eachConnectionTakesItsOwnDecisionsInOrder() {
        let decisions = FrontDoorDecisions()
        let (first, second) = (EmbeddedChannel(), EmbeddedChannel())
        decisions.pass(batch("a", reserved: 5), on: first)
        decisions.pass(nil, on: first)
        decisions.pass(batch("b", reserved: nil), on: second)
        decisions.pass(batch("c", reserved: 7), on: first)
        #expect(decisions.take(for: first)?.principal.name == "a")
        #expect(decisions.take(for: first) == nil, "a request left to the route")
        #expect(decisions.take(for: second)?.principal.name == "b")
        #expect(decisions.take(for: first)?.reserved == 7)
        #expect(decisions.take(for: first) == nil, "nothing queued: the route decides")
        #expect(decisions.close(first).isEmpty)
    }

    @Test func aClosedConnectionHandsBackWhatItsRequestsNeverTook() {
        let decisions = FrontDoorDecisions()
        let channel = EmbeddedChannel()
        decisions.pass(batch("a", reserved: 5), on: channel)
        decisions.pass(nil, on: channel)
        decisions.pass(batch("a", reserved: 3), on: channel)
        #expect(decisions.close(channel).map(\.reserved) == [5, 3])
        #expect(decisions.take(for: channel) == nil)
        #expect(decisions.close(channel).isEmpty, "closed once")
    }
}

import Tracker

/// xorshift64*: a seeded generator, so a failing stream can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x2545_F491_4F6C_DD1D : seed }
    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }
}

/// Random native-ad traffic that hits PROTOCOL.md 5's edges often: ties, the 1 s tolerance and
/// duplicate-click gap, the 1 h stale and attribution limits, midnight, test traffic,
/// several sources and adapters per ad.
enum RandomTraffic {
    static let adUnits = ["/1234/home/native", "/1234/feed/native", "/6499/example/native"]
    static let formats = ["10063170", "native"]
    static let assets = ["MainImage", "Headline"]
    static let adapters: [String?] = [nil, nil, "AppLovin", "Meta"]

    /// Ads loaded within `spread` seconds of one of `around` (by default midnight between day0
    /// and day1, so that many ads straddle it).
    static func events(ads: Int, around: [Timestamp] = [Events.at(day: 1, 0)], spread: Int = 5400,
                       using g: inout SeededGenerator) -> [TrackingEvent] {
        var out: [TrackingEvent] = []
        // The load the next ads come from (PROTOCOL.md 10): about half the ads name one, and a
        // load often gives several ads.
        var load: (id: String, remaining: Int)?
        for a in 0..<ads {
            let ad = "req-\(a)-\(g.next() % 10_000)"
            let unit = adUnits.randomElement(using: &g)!
            let format = formats.randomElement(using: &g)!
            let adapter = adapters.randomElement(using: &g)!
            let eea = Bool.random(using: &g), reservation = Bool.random(using: &g)
            let loaded = around.randomElement(using: &g)! + .seconds(Int.random(in: -spread...spread, using: &g))
            /// An instant relative to the load: often exactly on a rule's edge.
            func offset(_ base: Timestamp) -> Timestamp {
                let edges: [Int64] = [0, 1_000_000, -1_000_000, -1_000_001, 3_600_000_000, 3_600_000_001, 999_999]
                if Int.random(in: 0..<3, using: &g) == 0 { return base + .microseconds(edges.randomElement(using: &g)!) }
                return base + .milliseconds(Int64.random(in: -3_000...4_000_000, using: &g))
            }
            func event(_ type: EventType, _ at: Timestamp, asset: String? = nil) -> TrackingEvent {
                let source = EventSource.allCases.randomElement(using: &g)!
                let test = Int.random(in: 0..<12, using: &g) == 0
                // Now and then an event of the ad disagrees about its unit/format or flags.
                let odd = Int.random(in: 0..<15, using: &g) == 0
                return Events.make(type, ad: ad, at: at, id: randomID(&g), adUnit: odd ? adUnits[0] : unit,
                                   formatId: odd ? formats[1] : format, asset: asset, source: source,
                                   adapter: source == .mediation ? adapter ?? "AdMob" : adapter, eea: odd ? !eea : eea,
                                   reservation: reservation, test: test)
            }
            var loadId: String?
            if Bool.random(using: &g) {
                if load == nil || load!.remaining == 0 {
                    let id = "load-\(a)-\(g.next() % 10_000)"
                    load = (id, Int.random(in: 1...3, using: &g))
                    out += loadEvents(id, at: loaded, unit: unit, filled: true, using: &g)
                }
                load!.remaining -= 1
                loadId = load!.id
            }
            for _ in 0..<Int.random(in: 0...2, using: &g) {
                var e = event(.adLoaded, loaded + .milliseconds(Int64.random(in: 0...30_000, using: &g)))
                if let loadId {
                    e = Events.make(.adLoaded, ad: ad, at: e.correctedAt, id: e.id, adUnit: e.adUnit, formatId: e.formatId,
                                    source: e.source, adapter: e.adapter, eea: e.eea, reservation: e.reservation, test: e.test,
                                    loadId: loadId, latencyMs: Bool.random(using: &g) ? Int.random(in: 0...20_000, using: &g) : nil)
                }
                out.append(e)
            }
            let impressionAt = offset(loaded)
            for i in 0..<Int.random(in: 0...3, using: &g) {
                out.append(event(.impression, i == 0 ? impressionAt : offset(impressionAt)))
            }
            var clickAt = offset(impressionAt)
            for _ in 0..<Int.random(in: 0...4, using: &g) {
                out.append(event(.click, clickAt, asset: assets.randomElement(using: &g)!))
                clickAt = clickAt + .microseconds([0, 500_000, 1_000_000, 1_000_001, 2_500_000].randomElement(using: &g)!)
            }
            for _ in 0..<Int.random(in: 0...2, using: &g) { out.append(event(.adchoicesImpression, offset(impressionAt))) }
            for _ in 0..<Int.random(in: 0...1, using: &g) { out.append(event(.adchoicesClick, offset(impressionAt))) }
            for type in [EventType.videoPlay, .videoPause, .videoEnd, .videoMute] where Bool.random(using: &g) {
                out.append(event(type, offset(impressionAt)))
            }
        }
        out += unfilledLoads(ads / 4, around: around, spread: spread, using: &g)
        return out
    }

    /// Loads that get no ad here: failed, unanswered, or never requested (a waterfall alone).
    static func unfilledLoads(_ count: Int, around: [Timestamp] = [Events.at(day: 1, 0)], spread: Int = 5400,
                              using g: inout SeededGenerator) -> [TrackingEvent] {
        var out: [TrackingEvent] = []
        for l in 0..<count {
            let at = around.randomElement(using: &g)! + .seconds(Int.random(in: -spread...spread, using: &g))
            out += loadEvents("lone-\(l)-\(g.next() % 10_000)", at: at, unit: adUnits.randomElement(using: &g)!, filled: false, using: &g)
        }
        return out
    }

    static let errorCodes: [AdErrorCode] = [.noFill, .networkError, .timeout, .mediationNoFill, .internalError]
    static let networks = ["AppLovin", "Meta", "Unity"]

    /// A load's own events: its request (sometimes retried, sometimes missing), a failure
    /// (sometimes before a late fill), and a waterfall of networks (a result sometimes repeated).
    static func loadEvents(_ loadId: String, at: Timestamp, unit: String, filled: Bool, using g: inout SeededGenerator) -> [TrackingEvent] {
        var out: [TrackingEvent] = []
        let test = Int.random(in: 0..<12, using: &g) == 0
        let format = [nil, "10063170", "native"].randomElement(using: &g)! ?? ""
        let start = at - .milliseconds(Int64.random(in: 0...3_000, using: &g))
        func latency() -> Int? { Int.random(in: 0..<4, using: &g) == 0 ? nil : [5, 10, 11, 150, 999, 1000, 2500, 600_000, Int.random(in: 0...60_000, using: &g)].randomElement(using: &g)! }
        let requests = [0, 1, 1, 1, 2].randomElement(using: &g)!
        for r in 0..<requests {
            out.append(Events.load(.adRequest, loadId, at: start + .milliseconds(Int64(r * 500)), id: randomID(&g), adUnit: unit,
                                   formatId: format, adsRequested: Int.random(in: 1...5, using: &g), test: test))
        }
        if !filled || Int.random(in: 0..<4, using: &g) == 0 {
            for _ in 0..<Int.random(in: 0...2, using: &g) {
                out.append(Events.load(.adFailed, loadId, at: start + .milliseconds(Int64.random(in: 0...5_000, using: &g)), id: randomID(&g),
                                       adUnit: unit, formatId: format, latencyMs: latency(), errorCode: errorCodes.randomElement(using: &g)!,
                                       test: test))
            }
        }
        for position in 1...Int.random(in: 1...3, using: &g) where Bool.random(using: &g) {
            let adapter = networks.randomElement(using: &g)!
            for _ in 0..<[1, 1, 1, 2].randomElement(using: &g)! {
                let result = MediationResult.allCases.randomElement(using: &g)!
                out.append(Events.load(.mediationResult, loadId, at: start + .milliseconds(Int64.random(in: 0...4_000, using: &g)),
                                       id: randomID(&g), adUnit: unit, formatId: format, latencyMs: latency(),
                                       errorCode: result == .failed ? errorCodes.randomElement(using: &g)! : nil, result: result,
                                       adapter: adapter, position: position, test: test))
            }
        }
        return out
    }

    static func randomID(_ g: inout SeededGenerator) -> PackedUUID {
        let hex = Array("0123456789abcdef")
        var s = ""
        for i in 0..<32 {
            if [8, 12, 16, 20].contains(i) { s += "-" }
            s.append(hex[Int(g.next() % 16)])
        }
        return PackedUUID(s)!
    }

    /// A delivery of `events`: every event at least once, some several times (retries),
    /// in a shuffled order (so late events arrive after later ones), cut into chunks.
    static func deliveries(of events: [TrackingEvent], chunks: Int, using g: inout SeededGenerator) -> [[TrackingEvent]] {
        var stream = events
        for e in events where Int.random(in: 0..<4, using: &g) == 0 {
            for _ in 0..<Int.random(in: 1...3, using: &g) { stream.append(e) }
        }
        stream.shuffle(using: &g)
        var out: [[TrackingEvent]] = []
        let size = (stream.count + chunks - 1) / chunks
        var start = 0
        while start < stream.count {
            out.append(Array(stream[start..<min(start + size, stream.count)]))
            start += size
        }
        return out
    }
}

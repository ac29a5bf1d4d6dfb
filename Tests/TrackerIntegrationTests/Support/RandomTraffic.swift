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
            for _ in 0..<Int.random(in: 0...2, using: &g) { out.append(event(.adLoaded, loaded)) }
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

/// `{"sentAt": "…", "events": [ … ]}` around the events' stored JSON.
///
/// Built anew for every attempt, so `sentAt` is the device clock when this attempt left: the
/// server's time correction (`receivedAt - (sentAt - occurredAt)`) then holds for a retry
/// hours later as for the first try.
enum BatchBody {
    static func make(sentAtMicros: Int64, events: [[UInt8]]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(events.reduce(64) { $0 + $1.count + 1 })
        out.append(contentsOf: Array("{\"sentAt\":\"".utf8))
        JSONWriting.appendTimestamp(micros: sentAtMicros, to: &out)
        out.append(contentsOf: Array("\",\"events\":[".utf8))
        for (i, event) in events.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: event)
        }
        out.append(contentsOf: [UInt8(ascii: "]"), UInt8(ascii: "}")])
        return out
    }
}

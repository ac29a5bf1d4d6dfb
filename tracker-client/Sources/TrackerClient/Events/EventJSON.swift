import Foundation

/// One event as the protocol's section 1 (docs/PROTOCOL.md) writes it. `id` is always the first member (the client reads
/// it back from a stored record to name a rejected event); fields left at their default
/// (`eea`, `reservation`, `test` false, no adapter, no attributes) are left out.
enum EventJSON {
    static func encode(id: UUID, type: EventType, ad: TrackedAd, source: EventSource, assetKey: String?,
                       clickAction: ClickAction?, occurredAtMicros: Int64, attributes: [String: AttributeValue]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(320)
        out.append(UInt8(ascii: "{"))
        JSONWriting.appendKey("id", first: true, to: &out)
        out.append(UInt8(ascii: "\""))
        EventID.appendText(id, to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendKey("type", to: &out)
        JSONWriting.appendString(type.rawValue, to: &out)
        JSONWriting.appendKey("requestId", to: &out)
        JSONWriting.appendString(ad.requestId, to: &out)
        JSONWriting.appendKey("adUnit", to: &out)
        JSONWriting.appendString(ad.adUnit, to: &out)
        JSONWriting.appendKey("formatId", to: &out)
        JSONWriting.appendString(ad.format.wireValue, to: &out)
        if let assetKey {
            JSONWriting.appendKey("assetKey", to: &out)
            JSONWriting.appendString(assetKey, to: &out)
        }
        if let clickAction {
            JSONWriting.appendKey("clickAction", to: &out)
            JSONWriting.appendString(clickAction.rawValue, to: &out)
        }
        JSONWriting.appendKey("occurredAt", to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendTimestamp(micros: occurredAtMicros, to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendKey("source", to: &out)
        JSONWriting.appendString(source.rawValue, to: &out)
        if let adapter = ad.adapter {
            JSONWriting.appendKey("adapter", to: &out)
            JSONWriting.appendString(adapter, to: &out)
        }
        for (name, on) in [("eea", ad.eea), ("reservation", ad.reservation), ("test", ad.test)] where on {
            JSONWriting.appendKey(name, to: &out)
            out.append(contentsOf: Array("true".utf8))
        }
        if !attributes.isEmpty {
            JSONWriting.appendKey("attributes", to: &out)
            out.append(UInt8(ascii: "{"))
            for (i, key) in attributes.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriting.appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                switch attributes[key]! {
                case .string(let text):
                    JSONWriting.appendString(text, to: &out)
                case .number(let text):
                    // Written as given when it is a JSON number; anything else would make the
                    // whole batch unreadable, so it goes as a string and the server keeps it.
                    if JSONWriting.isNumber(text) {
                        out.append(contentsOf: text.utf8)
                    } else {
                        JSONWriting.appendString(text, to: &out)
                    }
                case .bool(let flag):
                    out.append(contentsOf: Array((flag ? "true" : "false").utf8))
                }
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

import Foundation

/// The fields of one event other than its id, type, time and attributes: an ad's, or a load's
/// (the protocol's section 10: no `requestId`, a `loadId`, the funnel's fields).
struct EventFields: Sendable {
    var requestId: String?
    var loadId: String?
    var adUnit: String
    var format: NativeAdFormat?
    var source: EventSource
    var assetKey: String?
    var clickAction: ClickAction?
    var adapter: String?
    var eea = false
    var reservation = false
    var test = false
    var adsRequested: Int?
    var latencyMs: Int?
    var errorCode: AdErrorCode?
    var result: MediationResult?
    var position: Int?
}

/// One event as the protocol's section 1 (docs/PROTOCOL.md) writes it. `id` is always the first member (the client reads
/// it back from a stored record to name a rejected event); fields left at their default
/// (`eea`, `reservation`, `test` false, no adapter, no attributes) are left out.
enum EventJSON {
    static func encode(id: UUID, type: EventType, fields: EventFields, occurredAtMicros: Int64,
                       attributes: [String: AttributeValue]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(320)
        out.append(UInt8(ascii: "{"))
        JSONWriting.appendKey("id", first: true, to: &out)
        out.append(UInt8(ascii: "\""))
        EventID.appendText(id, to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendKey("type", to: &out)
        JSONWriting.appendString(type.rawValue, to: &out)
        for (name, value) in [("requestId", fields.requestId), ("loadId", fields.loadId), ("adUnit", fields.adUnit),
                              ("formatId", fields.format?.wireValue), ("assetKey", fields.assetKey),
                              ("clickAction", fields.clickAction?.rawValue), ("errorCode", fields.errorCode?.rawValue),
                              ("result", fields.result?.rawValue)] {
            guard let value else { continue }
            JSONWriting.appendKey(name, to: &out)
            JSONWriting.appendString(value, to: &out)
        }
        for (name, value) in [("adsRequested", fields.adsRequested), ("latencyMs", fields.latencyMs), ("position", fields.position)] {
            guard let value else { continue }
            JSONWriting.appendKey(name, to: &out)
            out.append(contentsOf: Array(String(value).utf8))
        }
        JSONWriting.appendKey("occurredAt", to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendTimestamp(micros: occurredAtMicros, to: &out)
        out.append(UInt8(ascii: "\""))
        JSONWriting.appendKey("source", to: &out)
        JSONWriting.appendString(fields.source.rawValue, to: &out)
        if let adapter = fields.adapter {
            JSONWriting.appendKey("adapter", to: &out)
            JSONWriting.appendString(adapter, to: &out)
        }
        for (name, on) in [("eea", fields.eea), ("reservation", fields.reservation), ("test", fields.test)] where on {
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

/// An event the batch carried but the log will not store, and why.
public struct Rejection: Sendable, Hashable {
    /// The event's position in the batch's `events` array (from 0).
    public var index: Int
    /// The event's `id` as sent, when it had a string there.
    public var id: String?
    /// Every rule the event breaks, each naming the field.
    public var error: String
    /// The field of the first rule it breaks (`event` when it is not an object): a small,
    /// fixed set of values, for the rejected-events metric.
    public var reason: String = "event"

    public init(index: Int, id: String?, error: String, reason: String = "event") {
        self.index = index
        self.id = id
        self.error = error
        self.reason = reason
    }
}

/// A batch split into the events to store and the ones refused.
public struct DecodedBatch: Sendable {
    public var accepted: [(index: Int, event: TrackingEvent)]
    public var rejected: [Rejection]
}

/// Why a whole batch is refused: nothing of it is stored.
public enum BatchError: Error, Sendable, Equatable {
    /// The body is not JSON.
    case malformedJSON(JSONSyntaxError)
    /// The body is JSON but not an object; the JSON type it is.
    case notAnObject(String)
    /// The object has no `events` member; how many events a batch may hold.
    case missingEvents(limit: Int)
    /// `events` is not an array; the JSON type it is.
    case eventsNotAnArray(String)
    /// `sentAt` is a string but not an RFC 3339 time; an excerpt of it.
    case sentAtNotATime(String)
    /// `sentAt` is neither a string nor null; the JSON type it is.
    case sentAtNotAString(String)
    case bodyTooLarge(bytes: Int, limit: Int)
    case tooManyEvents(count: Int, limit: Int)
    case eventTooLarge(index: Int, bytes: Int, limit: Int)

    /// What the client should fix.
    public var message: String {
        switch self {
        case .malformedJSON(let error):
            "the body is not valid JSON: \(error.description)"
        case .notAnObject(let type):
            "the body must be a JSON object such as {\"sentAt\": \"…\", \"events\": [ … ]}, got \(type)"
        case .missingEvents(let limit):
            "the body must have an 'events' array (at most \(limit) events)"
        case .eventsNotAnArray(let type):
            "events must be an array of event objects, got \(type)"
        case .sentAtNotATime(let excerpt):
            "sentAt must be an RFC 3339 time with Z or a numeric offset (e.g. 2026-11-20T10:00:03.120Z), got '\(excerpt)'; every event's corrected time depends on it"
        case .sentAtNotAString(let type):
            "sentAt must be an RFC 3339 time as a string, got \(type)"
        case .bodyTooLarge(let bytes, let limit):
            "the body is \(bytes) bytes after decompression; at most \(limit) bytes (\(limit / 1024) KiB) are allowed: split the batch"
        case .tooManyEvents(let count, let limit):
            "the batch has \(count) events; at most \(limit) are allowed: split the batch"
        case .eventTooLarge(let index, let bytes, let limit):
            "event \(index) is \(bytes) bytes; at most \(limit) bytes (\(limit / 1024) KiB) per event are allowed: trim its attributes"
        }
    }
}

/// PROTOCOL.md sections 1 and 3 as a pure function: request bytes in, valid events with their
/// corrected time and per-event rejections out. The HTTP layer only maps `BatchError`
/// to a status; every rule lives here.
public struct BatchDecoder: Sendable {
    public var limits: IngestLimits

    public init(limits: IngestLimits = IngestLimits()) {
        self.limits = limits
    }

    /// - Parameters:
    ///   - body: the request body, decompressed.
    ///   - receivedAt: the server's time of the request, for the time correction.
    ///   - serverKey: whether events may carry `userAgent` and `ip` (a server key's batch).
    ///   - networks: the networks the key may send events for; an event of another is rejected
    ///     (`nil`: every network).
    public func decode(_ body: [UInt8], receivedAt: Timestamp, serverKey: Bool = false,
                       networks: NetworkScope? = nil) throws(BatchError) -> DecodedBatch {
        guard body.count <= limits.maxBodyBytes else {
            throw .bodyTooLarge(bytes: body.count, limit: limits.maxBodyBytes)
        }
        let document: (value: JSONValue, spans: [Range<Int>]?)
        do {
            document = try JSONReader.parse(body, spanning: "events")
        } catch {
            throw .malformedJSON(error)
        }
        guard case .object = document.value else {
            throw .notAnObject(document.value.typeName)
        }
        guard let eventsValue = document.value.member("events") else {
            throw .missingEvents(limit: limits.maxEventsPerBatch)
        }
        guard case .array(let events) = eventsValue, let spans = document.spans else {
            throw .eventsNotAnArray(eventsValue.typeName)
        }
        guard events.count <= limits.maxEventsPerBatch else {
            throw .tooManyEvents(count: events.count, limit: limits.maxEventsPerBatch)
        }
        for (index, span) in spans.enumerated() where span.count > limits.maxEventBytes {
            throw .eventTooLarge(index: index, bytes: span.count, limit: limits.maxEventBytes)
        }

        let sentAt: Timestamp?
        switch document.value.member("sentAt") {
        case nil, .null?:
            sentAt = nil
        case .string(let text)?:
            guard let t = Timestamp(rfc3339: text) else {
                throw .sentAtNotATime(Violations.excerpt(text))
            }
            sentAt = t
        case let other?:
            throw .sentAtNotAString(other.typeName)
        }

        let rules = EventRules(limits: limits, receivedAt: receivedAt, sentAt: sentAt, serverKey: serverKey, networks: networks)
        var accepted: [(index: Int, event: TrackingEvent)] = []
        accepted.reserveCapacity(events.count)
        var rejected: [Rejection] = []
        for (index, value) in events.enumerated() {
            switch rules.validate(value) {
            case .success(let event):
                accepted.append((index, event))
            case .failure(let violations):
                var id: String?
                if case .string(let text)? = value.member("id") { id = text }
                rejected.append(Rejection(index: index, id: id, error: violations.text, reason: violations.firstField ?? "event"))
            }
        }
        return DecodedBatch(accepted: accepted, rejected: rejected)
    }
}

public struct IngestLimits: Sendable { public var maxEventsPerBatch = 500; public var maxBodyBytes = 512 * 1024; public init() {} }
public struct Rejection: Sendable, Hashable { public var index: Int; public var id: String?; public var error: String }
public struct DecodedBatch: Sendable { public var accepted: [(index: Int, event: TrackingEvent)]; public var rejected: [Rejection] }
public enum BatchError: Error, Sendable, Equatable { case malformedJSON(String), invalidBody(String), tooManyEvents(count: Int, limit: Int), eventTooLarge(index: Int, bytes: Int, limit: Int)
  public var message: String { "" } }
public struct BatchDecoder: Sendable { public init() {}; public func decode(_ body: [UInt8], receivedAt: Timestamp) throws(BatchError) -> DecodedBatch { throw .invalidBody("") } }
extension TrackingEvent { public var attributesJSON: String? { nil } }
public enum JSONText { public static func appendQuoted(_ s: String, to out: inout String) { out += "\"" + s + "\"" } }

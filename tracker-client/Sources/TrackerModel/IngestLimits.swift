/// The limits of the protocol's section 1 (docs/PROTOCOL.md).
public struct IngestLimits: Sendable {
    public var maxEventsPerBatch = 500
    /// The body after decompression.
    public var maxBodyBytes = 512 * 1024
    /// One event as written in the body.
    public var maxEventBytes = 16 * 1024
    public var maxAttributes = 32
    /// The `attributes` object serialized as compact JSON.
    public var maxAttributeBytes = 2 * 1024

    public init() {}
}

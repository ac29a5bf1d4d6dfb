/// The limits of the protocol's section 1 (docs/PROTOCOL.md).
public struct IngestLimits: Sendable {
    /// Events in one batch; a larger batch is refused whole (`413`).
    public var maxEventsPerBatch = 500
    /// The body after decompression.
    public var maxBodyBytes = 512 * 1024
    /// One event as written in the body.
    public var maxEventBytes = 16 * 1024
    /// Keys in one event's `attributes`.
    public var maxAttributes = 32
    /// The `attributes` object serialized as compact JSON.
    public var maxAttributeBytes = 2 * 1024

    /// The limits the tracker enforces.
    public init() {}
}

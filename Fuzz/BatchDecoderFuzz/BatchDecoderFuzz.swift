import TrackerInput

/// libFuzzer's entry point: one input is one request body for `BatchDecoder.decode`.
///
/// Besides crashes (ASan, traps, overflows), it checks what the protocol promises of any body: a
/// refused batch says why; a parsed one accounts for every event exactly once, and every
/// accepted event obeys the field rules and the time correction it was decoded under.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzBatchDecoder(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = Array(UnsafeBufferPointer(start: data, count: size))
    let decoder = BatchDecoder()
    // A fixed server time, so a crash replays exactly.
    let receivedAt = Timestamp(microseconds: 1_795_000_000_000_000)
    let batch: DecodedBatch
    do {
        batch = try decoder.decode(body, receivedAt: receivedAt)
    } catch {
        precondition(!error.message.isEmpty, "a refused batch must say why")
        return 0
    }
    var indices = Set<Int>()
    for (index, event) in batch.accepted {
        precondition(indices.insert(index).inserted, "event \(index) counted twice")
        checkAccepted(event, receivedAt: receivedAt, limits: decoder.limits)
    }
    for rejection in batch.rejected {
        precondition(indices.insert(rejection.index).inserted, "event \(rejection.index) counted twice")
        precondition(!rejection.error.isEmpty, "a rejection must say why")
    }
    precondition(indices.isEmpty || indices.max()! == indices.count - 1, "events are numbered 0..<count")
    precondition(batch.accepted.count <= decoder.limits.maxEventsPerBatch)
    return 0
}

/// The field rules of PROTOCOL.md section 1 and the time rules of section 3, on an accepted event.
func checkAccepted(_ event: TrackingEvent, receivedAt: Timestamp, limits: IngestLimits) {
    func isControl(_ s: Unicode.Scalar) -> Bool { s.value < 0x20 || (0x7F...0x9F).contains(s.value) }
    func identifier(_ text: String, _ range: ClosedRange<Int>) {
        precondition(range.contains(text.unicodeScalars.count), "identifier length \(text.unicodeScalars.count) outside \(range)")
        precondition(!text.unicodeScalars.contains(where: isControl), "control character in an identifier")
    }
    // A load's own events (PROTOCOL.md 10) have a loadId and no requestId; every other event a requestId.
    if event.type.isLoadEvent {
        precondition(event.requestId == nil, "a load's event with a requestId")
        precondition(event.loadId != nil, "a load's event without its loadId")
    } else {
        identifier(event.requestId ?? "", 1...128)
        precondition(event.loadId == nil || event.type == .adLoaded, "a loadId on a type that has none")
    }
    if let loadId = event.loadId { identifier(loadId, 1...128) }
    if let ads = event.adsRequested { precondition(event.type == .adRequest && (1...5).contains(ads)) }
    if event.type == .adRequest { precondition(event.adsRequested != nil, "adsRequested defaults to 1") }
    if let latency = event.latencyMs {
        precondition([.adLoaded, .adFailed, .mediationResult].contains(event.type) && (0...600_000).contains(latency))
    }
    if event.type == .adFailed { precondition(event.errorCode != nil, "ad_failed without errorCode") }
    if event.errorCode != nil { precondition(event.type == .adFailed || event.type == .mediationResult) }
    if event.type == .mediationResult {
        precondition(event.result != nil && event.position.map { (1...100).contains($0) } == true, "a mediation_result's result and position")
        precondition(event.adapter.map { !$0.isEmpty } == true, "a mediation_result's adapter")
        if event.result == .failed { precondition(event.errorCode != nil, "a failed mediation_result without errorCode") }
    } else {
        precondition(event.result == nil && event.position == nil, "result or position on another type")
    }
    identifier(event.adUnit, 1...256)
    precondition(event.adUnit.hasPrefix("/"), "adUnit must start with /")
    if let assetKey = event.assetKey { identifier(assetKey, 1...64) }
    if event.type == .click { precondition(event.assetKey != nil, "a click needs an assetKey") }
    if let adapter = event.adapter { identifier(adapter, 0...64) }
    precondition((!event.formatId.isEmpty || event.type.isLoadEvent) && event.formatId.utf8.count <= 64)
    precondition(event.attributes.count <= limits.maxAttributes)
    if let json = event.attributesJSON {
        precondition(json.utf8.count <= limits.maxAttributeBytes, "attributes over the limit")
        precondition(!json.utf8.contains(0), "NUL in attributes")
    }
    precondition(event.correctedAt >= Timestamp(microseconds: 0), "corrected time before 1970")
    if let sentAt = event.sentAt {
        precondition(event.correctedAt <= receivedAt + .seconds(1), "corrected time after receipt + 1 s")
        precondition(event.occurredAt - sentAt <= .seconds(1))
    } else {
        precondition(event.correctedAt <= receivedAt, "corrected time after receipt without sentAt")
    }
    precondition(event.receivedAt == receivedAt)
}

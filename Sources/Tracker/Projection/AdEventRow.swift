import TrackerPostgres

/// The log columns every reader of ad events selects, in one order: the projector's step
/// (`ProjectorSQL.nextEvents`), the rebuild's `COPY` (`RebuildSQL.copyLog`) and the audit
/// (`AdAuditSQL.logged`). A reader appends its own columns after these.
enum AdEventColumn: Int, CaseIterable {
    case requestId, id, type, correctedAt, adUnit, formatId, assetKey, source, adapter, eea, reservation, test
    /// Who sent the event (the invalid-traffic rules): when, with which user agent, from where,
    /// and whether a browser fetched it as a beacon (`EventChannel`).
    case receivedAt, userAgentId, clientIP, beacon
    /// The funnel's fields (PROTOCOL.md 10).
    case loadId, adsRequested, latencyMs, errorCode, result, position

    var name: String {
        switch self {
        case .requestId: "request_id"
        case .id: "id"
        case .type: "type"
        case .correctedAt: "corrected_at"
        case .adUnit: "ad_unit"
        case .formatId: "format_id"
        case .assetKey: "asset_key"
        case .source: "source"
        case .adapter: "adapter"
        case .eea: "eea"
        case .reservation: "reservation"
        case .test: "test"
        case .receivedAt: "received_at"
        case .userAgentId: "user_agent_id"
        case .clientIP: "client_ip"
        case .beacon: "key_name"
        case .loadId: "load_id"
        case .adsRequested: "ads_requested"
        case .latencyMs: "latency_ms"
        case .errorCode: "error_code"
        case .result: "result"
        case .position: "position"
        }
    }

    /// What a SELECT list has for the column: its name, or the expression it is read from.
    private var selected: String {
        // The prefix is a constant with no quote in it (a key name has no ':').
        self == .beacon ? "starts_with(key_name, '\(BeaconVisit.keyNamePrefix)')" : name
    }

    /// `request_id, id, type, …` for a SELECT list.
    static let list = allCases.map(\.selected).joined(separator: ", ")
}

/// A column of an ad-event row that does not hold what this tracker reads (a type or source
/// added by a newer version, a NULL where the schema has none).
struct UnreadableColumn: Error {
    let column: AdEventColumn
}

/// One log row's `AdEventColumn`s in PostgreSQL's binary format (a binary result or a binary
/// `COPY`), checked and decoded in one place. The strings stay bytes, valid as long as the row's
/// buffer: the rebuild copies them straight into its spill files, the others make an `AdEvent`.
struct AdEventRow {
    /// The log's key of the event (`TrackingEvent.logKey`): its ad's request id, or its load's id.
    let requestId: UnsafeRawBufferPointer
    /// The id's 16 bytes.
    let id: UnsafeRawBufferPointer
    let type: EventType
    let correctedAt: Timestamp
    let adUnit: UnsafeRawBufferPointer
    let formatId: UnsafeRawBufferPointer
    let assetKey: UnsafeRawBufferPointer?
    let source: EventSource
    let adapter: UnsafeRawBufferPointer?
    let eea: Bool
    let reservation: Bool
    /// The event's own `test` flag, without the test ad units.
    let testFlag: Bool
    let receivedAt: Timestamp
    /// The number of its user agent in `user_agents`; `nil` for events stored before the log kept one.
    let userAgentId: Int32?
    /// Its client's address, a binary `inet`; `nil` when none was recorded.
    let clientIP: UnsafeRawBufferPointer?
    /// The load a load's event belongs to, or an `ad_loaded` links its ad to.
    let loadId: UnsafeRawBufferPointer?
    /// The funnel's other fields.
    let funnel: AdState.FunnelPart
    /// Sent to `POST /v1/events`, or fetched as a beacon.
    let channel: EventChannel

    /// Reads the row through `value`, which gives a column's bytes, or `nil` for NULL.
    @inline(__always)
    init(_ value: (AdEventColumn) -> UnsafeRawBufferPointer?) throws(UnreadableColumn) {
        func required(_ column: AdEventColumn) throws(UnreadableColumn) -> UnsafeRawBufferPointer {
            guard let bytes = value(column) else { throw UnreadableColumn(column: column) }
            return bytes
        }
        guard let type = Self.label(try required(.type), in: Self.types) else { throw UnreadableColumn(column: .type) }
        guard let source = Self.label(try required(.source), in: Self.sources) else { throw UnreadableColumn(column: .source) }
        let id = try required(.id)
        guard id.count == 16 else { throw UnreadableColumn(column: .id) }
        guard let corrected = Timestamp(timestamptz: try required(.correctedAt)) else { throw UnreadableColumn(column: .correctedAt) }
        self.type = type
        self.source = source
        self.id = id
        correctedAt = corrected
        requestId = try required(.requestId)
        adUnit = try required(.adUnit)
        formatId = try required(.formatId)
        assetKey = value(.assetKey)
        adapter = value(.adapter)
        eea = Self.bool(try required(.eea))
        reservation = Self.bool(try required(.reservation))
        testFlag = Self.bool(try required(.test))
        guard let received = Timestamp(timestamptz: try required(.receivedAt)) else { throw UnreadableColumn(column: .receivedAt) }
        receivedAt = received
        if let agent = value(.userAgentId) {
            guard agent.count == 4 else { throw UnreadableColumn(column: .userAgentId) }
            userAgentId = Int32(bitPattern: UInt32(agent[0]) << 24 | UInt32(agent[1]) << 16 | UInt32(agent[2]) << 8 | UInt32(agent[3]))
        } else {
            userAgentId = nil
        }
        clientIP = value(.clientIP)
        loadId = value(.loadId)
        func integer(_ column: AdEventColumn) throws(UnreadableColumn) -> Int? {
            guard let bytes = value(column) else { return nil }
            guard bytes.count == 4 else { throw UnreadableColumn(column: column) }
            return Int(Int32(bitPattern: UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])))
        }
        func named<T>(_ column: AdEventColumn, _ labels: [([UInt8], T)]) throws(UnreadableColumn) -> T? {
            guard let bytes = value(column) else { return nil }
            guard let found = Self.label(bytes, in: labels) else { throw UnreadableColumn(column: column) }
            return found
        }
        funnel = AdState.FunnelPart(latencyMs: try integer(.latencyMs), errorCode: try named(.errorCode, Self.errorCodes),
                                    result: try named(.result, Self.results), position: try integer(.position),
                                    adsRequested: try integer(.adsRequested))
        channel = Self.bool(try required(.beacon)) ? .beacon : .app
    }

    /// The key of the load whose state keeps a reference to this event: an `ad_loaded` that names its load.
    var referencedLoad: UnsafeRawBufferPointer? { type == .adLoaded ? loadId : nil }

    /// The client's address; `nil` when none was recorded (or the bytes are not an address).
    var clientAddress: IPAddress? { clientIP.flatMap { IPAddress(inetBinary: $0) } }

    /// The columns of row `row` of a binary result whose first columns are `AdEventColumn.list`.
    static func values(of rows: QueryResult, row: Int) -> (AdEventColumn) -> UnsafeRawBufferPointer? {
        { column in rows.isNull(row, column.rawValue) ? nil : rows.bytes(row, column.rawValue) }
    }

    /// Test traffic: the `test` flag or one of the SDK's test ad units (PROTOCOL.md section 5).
    var isTest: Bool { testFlag || AdState.isTestAdUnit(adUnit) }

    /// The ad's request id as a string.
    var requestIdString: String { String(decoding: requestId, as: UTF8.self) }

    /// The event as the projections keep it; `strings` shares the repeated ad units and formats.
    func event(strings: inout StringTable, label: IVTLabel? = nil) -> AdEvent {
        var event = AdEvent(id: PackedUUID(binary: id), type: type, correctedAt: correctedAt,
                            adUnit: strings.string(adUnit), formatId: strings.string(formatId),
                            assetKey: assetKey.map { strings.string($0) }, source: source,
                            adapter: adapter.map { strings.string($0) }, eea: eea, reservation: reservation, isTest: isTest, label: label)
        event.latencyMs = funnel.latencyMs
        event.errorCode = funnel.errorCode
        event.result = funnel.result
        event.position = funnel.position
        event.adsRequested = funnel.adsRequested
        return event
    }

    private static let types = EventType.allCases.map { (Array($0.rawValue.utf8), $0) }
    private static let sources = EventSource.allCases.map { (Array($0.rawValue.utf8), $0) }
    private static let errorCodes = AdErrorCode.allCases.map { (Array($0.rawValue.utf8), $0) }
    private static let results = MediationResult.allCases.map { (Array($0.rawValue.utf8), $0) }

    /// The case whose label (an enum's binary value is its label) equals `bytes`.
    private static func label<T>(_ bytes: UnsafeRawBufferPointer, in labels: [([UInt8], T)]) -> T? {
        for (label, value) in labels where label.count == bytes.count && label.elementsEqual(bytes) { return value }
        return nil
    }

    private static func bool(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count == 1 && bytes[0] != 0
    }
}

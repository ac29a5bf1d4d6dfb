import TrackerPostgres

/// The projector's memory of one ad: every projected event of it, packed into one value.
///
/// `ad_state` holds one row per ad (`request_id`, `events bytea`) instead of one row per
/// event: a step reads and rewrites one row per touched ad, and the packed events take
/// about a sixth of the bytes of a row each (docs/PROJECTOR-DESIGN.md). The rules
/// (`AdContribution`) still see the ad's whole list of events, so nothing about PROTOCOL.md 5
/// moves here; this type only stores the list.
///
/// Layout, one record per event, records back to back (so two values concatenate into a
/// valid one), every integer big-endian:
///
/// ```
/// u8 type (EventType's case index)   u8 source (EventSource's case index)   u8 flags
/// [u8 label (IVTLabel.stored's index)]                                   if flags & labelled
/// 16 bytes id                        i64 corrected time, µs since 1970
/// [u16 length + UTF-8 ad unit, u16 length + UTF-8 format id]   unless flags & sameUnitAndFormat
/// [u16 length + UTF-8 asset key]     if flags & hasAssetKey
/// [u16 length + UTF-8 adapter]       if flags & hasAdapter
/// [u8 funnel flags                   if flags & funnel
///  [i32 latencyMs]                   if funnel flags & hasLatency
///  [u8 errorCode (AdErrorCode's case index)]   if funnel flags & hasErrorCode
///  [u8 result (MediationResult's case index)]  if funnel flags & hasResult
///  [u8 position]                     if funnel flags & hasPosition
///  [u8 adsRequested]]                if funnel flags & hasAdsRequested
/// ```
///
/// A record with the funnel flag `loadReference` is a load's copy of an `ad_loaded` that names
/// it (`AdEvent.isLoadReference`).
///
/// `sameUnitAndFormat` refers to the previous record of the same value; the encoder never sets
/// it on a value's first record. Migration 010's `tracker_unpack_ad_events` reads the layout in SQL.
enum AdState {
    enum Flag {
        static let eea: UInt8 = 1, reservation: UInt8 = 2, test: UInt8 = 4, hasAssetKey: UInt8 = 8,
                   hasAdapter: UInt8 = 16, sameUnitAndFormat: UInt8 = 32, labelled: UInt8 = 64, funnel: UInt8 = 128
    }

    enum FunnelFlag {
        static let loadReference: UInt8 = 1, hasLatency: UInt8 = 2, hasErrorCode: UInt8 = 4, hasResult: UInt8 = 8,
                   hasPosition: UInt8 = 16, hasAdsRequested: UInt8 = 32
    }

    static let types = EventType.allCases
    static let sources = EventSource.allCases
    static let errorCodes = AdErrorCode.allCases
    static let results = MediationResult.allCases

    /// The funnel's part of a record (PROTOCOL.md 10).
    struct FunnelPart: Equatable {
        var loadReference = false
        var latencyMs: Int?
        var errorCode: AdErrorCode?
        var result: MediationResult?
        var position: Int?
        var adsRequested: Int?

        init(loadReference: Bool = false, latencyMs: Int? = nil, errorCode: AdErrorCode? = nil, result: MediationResult? = nil,
             position: Int? = nil, adsRequested: Int? = nil) {
            self.loadReference = loadReference
            self.latencyMs = latencyMs
            self.errorCode = errorCode
            self.result = result
            self.position = position
            self.adsRequested = adsRequested
        }

        init(_ e: AdEvent) {
            self.init(loadReference: e.isLoadReference, latencyMs: e.latencyMs, errorCode: e.errorCode, result: e.result,
                      position: e.position, adsRequested: e.adsRequested)
        }

        var isEmpty: Bool { self == FunnelPart() }
    }

    /// Appends one record: the one place the layout is written, for the projector's states
    /// (`encode`) and the rebuild's spill files (`RebuildBuckets`). `sameUnitAndFormat` leaves out
    /// the ad unit and format, equal to the previous record's of the same value; `loadReference`
    /// marks the record an `ad_loaded` leaves behind its load's key.
    static func appendRecord(_ e: some AdStateRecordSource, label: IVTLabel?, sameUnitAndFormat: Bool, loadReference: Bool,
                             into out: inout [UInt8]) {
        let (type, source, eea, reservation, test) = (e.type, e.source, e.eea, e.reservation, e.isTest)
        let (id, correctedAt, assetKey, adapter) = (e.packedId, e.correctedAt, e.assetKeyBytes, e.adapterBytes)
        let unitAndFormat = sameUnitAndFormat ? nil : (unit: e.adUnitBytes, format: e.formatIdBytes)
        var funnel = e.funnelPart
        funnel.loadReference = loadReference
        out.append(UInt8(truncatingIfNeeded: types.firstIndex(of: type) ?? 0))
        out.append(UInt8(truncatingIfNeeded: sources.firstIndex(of: source) ?? 0))
        var flags: UInt8 = 0
        if eea { flags |= Flag.eea }
        if reservation { flags |= Flag.reservation }
        if test { flags |= Flag.test }
        if assetKey != nil { flags |= Flag.hasAssetKey }
        if adapter != nil { flags |= Flag.hasAdapter }
        if unitAndFormat == nil { flags |= Flag.sameUnitAndFormat }
        if label != nil { flags |= Flag.labelled }
        if !funnel.isEmpty { flags |= Flag.funnel }
        out.append(flags)
        if let label { out.append(UInt8(truncatingIfNeeded: IVTLabel.stored.firstIndex(of: label) ?? 0)) }
        out.appendBigEndian(id.high)
        out.appendBigEndian(id.low)
        out.appendBigEndian(correctedAt.microseconds)
        func appendText(_ text: some Collection<UInt8>) {
            out.appendBigEndian(UInt16(truncatingIfNeeded: text.count))
            out.append(contentsOf: text)
        }
        if let (unit, format) = unitAndFormat {
            appendText(unit)
            appendText(format)
        }
        if let assetKey { appendText(assetKey) }
        if let adapter { appendText(adapter) }
        guard !funnel.isEmpty else { return }
        var funnelFlags: UInt8 = 0
        if funnel.loadReference { funnelFlags |= FunnelFlag.loadReference }
        if funnel.latencyMs != nil { funnelFlags |= FunnelFlag.hasLatency }
        if funnel.errorCode != nil { funnelFlags |= FunnelFlag.hasErrorCode }
        if funnel.result != nil { funnelFlags |= FunnelFlag.hasResult }
        if funnel.position != nil { funnelFlags |= FunnelFlag.hasPosition }
        if funnel.adsRequested != nil { funnelFlags |= FunnelFlag.hasAdsRequested }
        out.append(funnelFlags)
        if let latency = funnel.latencyMs { out.appendBigEndian(Int32(truncatingIfNeeded: latency)) }
        if let code = funnel.errorCode { out.append(UInt8(truncatingIfNeeded: errorCodes.firstIndex(of: code) ?? 0)) }
        if let result = funnel.result { out.append(UInt8(truncatingIfNeeded: results.firstIndex(of: result) ?? 0)) }
        if let position = funnel.position { out.append(UInt8(truncatingIfNeeded: position)) }
        if let ads = funnel.adsRequested { out.append(UInt8(truncatingIfNeeded: ads)) }
    }

    /// Appends `events` in the rules' order (corrected time, then id): equal lists give equal bytes,
    /// so a rebuilt `ad_state` equals the incremental one byte for byte.
    static func encode(_ events: [AdEvent], into out: inout [UInt8]) {
        let sorted = events.inRulesOrder
        var previous: AdEvent?
        for e in sorted {
            // By bytes: `String ==` would call two spellings of one text the same and store only the first.
            let same = previous.map { $0.adUnit.hasSameBytes(as: e.adUnit) && $0.formatId.hasSameBytes(as: e.formatId) } ?? false
            appendRecord(e, label: e.label, sameUnitAndFormat: same, loadReference: e.isLoadReference, into: &out)
            previous = e
        }
    }

    static func encode(_ events: [AdEvent]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(events.count * 40 + 40)
        encode(events, into: &out)
        return out
    }

    /// The events of a stored value; `nil` when the bytes do not follow the layout.
    static func decode(_ bytes: UnsafeRawBufferPointer, strings: inout StringTable) -> [AdEvent]? {
        var events: [AdEvent] = []
        var reader = ByteReader(bytes)
        var unit = "", format = ""
        while !reader.isAtEnd {
            guard let e = decodeRecord(&reader, unit: &unit, format: &format, first: events.isEmpty, strings: &strings) else { return nil }
            events.append(e)
        }
        return events
    }

    /// One record at the reader's position; `unit` and `format` carry the previous record's.
    static func decodeRecord(_ reader: inout ByteReader, unit: inout String, format: inout String, first: Bool,
                             strings: inout StringTable) -> AdEvent? {
        guard let typeIndex = reader.u8(), Int(typeIndex) < types.count,
              let sourceIndex = reader.u8(), Int(sourceIndex) < sources.count,
              let flags = reader.u8()
        else { return nil }
        var label: IVTLabel?
        if flags & Flag.labelled != 0 {
            guard let index = reader.u8(), Int(index) < IVTLabel.stored.count else { return nil }
            label = IVTLabel.stored[Int(index)]
        }
        guard let id = reader.uuid(), let micros = reader.i64() else { return nil }
        if flags & Flag.sameUnitAndFormat == 0 {
            guard let u = reader.string(&strings), let f = reader.string(&strings) else { return nil }
            (unit, format) = (u, f)
        } else if first {
            return nil
        }
        var asset: String?, adapter: String?
        if flags & Flag.hasAssetKey != 0 { guard let a = reader.string(&strings) else { return nil }; asset = a }
        if flags & Flag.hasAdapter != 0 { guard let a = reader.string(&strings) else { return nil }; adapter = a }
        var event = AdEvent(id: id, type: types[Int(typeIndex)], correctedAt: Timestamp(microseconds: micros),
                            adUnit: unit, formatId: format, assetKey: asset, source: sources[Int(sourceIndex)],
                            adapter: adapter, eea: flags & Flag.eea != 0, reservation: flags & Flag.reservation != 0,
                            isTest: flags & Flag.test != 0, label: label)
        if flags & Flag.funnel != 0 {
            guard let funnel = reader.u8() else { return nil }
            event.isLoadReference = funnel & FunnelFlag.loadReference != 0
            if funnel & FunnelFlag.hasLatency != 0 { guard let v = reader.i32() else { return nil }; event.latencyMs = Int(v) }
            if funnel & FunnelFlag.hasErrorCode != 0 {
                guard let i = reader.u8(), Int(i) < errorCodes.count else { return nil }
                event.errorCode = errorCodes[Int(i)]
            }
            if funnel & FunnelFlag.hasResult != 0 {
                guard let i = reader.u8(), Int(i) < results.count else { return nil }
                event.result = results[Int(i)]
            }
            if funnel & FunnelFlag.hasPosition != 0 { guard let v = reader.u8() else { return nil }; event.position = Int(v) }
            if funnel & FunnelFlag.hasAdsRequested != 0 { guard let v = reader.u8() else { return nil }; event.adsRequested = Int(v) }
        }
        return event
    }

    /// The test ad units as bytes, to recognise them without making a `String`.
    static let testAdUnits = AdEvent.testAdUnits.map { Array($0.utf8) }

    static func isTestAdUnit(_ bytes: UnsafeRawBufferPointer) -> Bool {
        testAdUnits.contains { $0.count == bytes.count && $0.elementsEqual(bytes) }
    }

}

/// Reads big-endian values from PostgreSQL's binary formats and from `AdState` values.
struct ByteReader {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { offset >= bytes.count }

    mutating func u8() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() -> Int? {
        guard offset + 2 <= bytes.count else { return nil }
        defer { offset += 2 }
        return Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
    }

    mutating func i32() -> Int32? {
        guard offset + 4 <= bytes.count else { return nil }
        defer { offset += 4 }
        return Int32(bitPattern: UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8
                     | UInt32(bytes[offset + 3]))
    }

    mutating func i64() -> Int64? {
        guard offset + 8 <= bytes.count else { return nil }
        var v: UInt64 = 0
        for i in 0..<8 { v = v << 8 | UInt64(bytes[offset + i]) }
        offset += 8
        return Int64(bitPattern: v)
    }

    mutating func uuid() -> PackedUUID? {
        guard offset + 16 <= bytes.count, let high = i64(), let low = i64() else { return nil }
        return PackedUUID(high: UInt64(bitPattern: high), low: UInt64(bitPattern: low))
    }

    /// The next `count` bytes.
    mutating func take(_ count: Int) -> UnsafeRawBufferPointer? {
        guard count >= 0, offset + count <= bytes.count else { return nil }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    /// A u16-length-prefixed UTF-8 string.
    mutating func string(_ strings: inout StringTable) -> String? {
        guard let count = u16(), offset + count <= bytes.count else { return nil }
        defer { offset += count }
        return strings.string(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count]))
    }

    /// The whole value as an integer (binary int8, xid8) or `nil` when it is not 8 bytes.
    static func int64(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard bytes.count == 8 else { return nil }
        var reader = ByteReader(bytes)
        return reader.i64()
    }
}

/// Strings made from bytes, made once: the few ad units, formats, asset keys and adapters
/// recur in almost every event, and a `String` longer than 15 bytes costs an allocation.
///
/// Bounded: once it holds `limit` strings it starts over, so a stream of distinct values
/// (request ids are never put here) cannot grow it without end.
struct StringTable {
    private var slots: [(hash: UInt64, bytes: [UInt8], string: String)?]
    private var used = 0
    private let limit: Int

    init(limit: Int = 4096) {
        self.limit = limit
        slots = Array(repeating: nil, count: limit * 2)
    }

    mutating func string(_ bytes: UnsafeRawBufferPointer) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { hash = (hash ^ UInt64(b)) &* 0x100_0000_01b3 }
        var i = Int(truncatingIfNeeded: hash & UInt64(slots.count - 1))
        while let slot = slots[i] {
            if slot.hash == hash, slot.bytes.elementsEqual(bytes) { return slot.string }
            i = (i + 1) & (slots.count - 1)
        }
        let string = String(decoding: bytes, as: UTF8.self)
        if used == limit {
            slots = Array(repeating: nil, count: slots.count)
            used = 0
            i = Int(truncatingIfNeeded: hash & UInt64(slots.count - 1))
        }
        slots[i] = (hash, Array(bytes), string)
        used += 1
        return string
    }
}

extension PackedUUID {
    /// 16 bytes (PostgreSQL's binary `uuid`).
    init(binary: UnsafeRawBufferPointer) {
        precondition(binary.count == 16, "a binary uuid is 16 bytes")
        var reader = ByteReader(binary)
        self = reader.uuid()!
    }
}

/// What `AdState`'s record holds of one event. The projector's `AdEvent` and the rebuild's
/// `AdEventRow` each give it, so a field the record gains is packed in one place
/// (`AdState.appendRecord`) for both.
protocol AdStateRecordSource {
    associatedtype Text: Collection<UInt8>
    var type: EventType { get }
    var source: EventSource { get }
    var eea: Bool { get }
    var reservation: Bool { get }
    var isTest: Bool { get }
    var packedId: PackedUUID { get }
    var correctedAt: Timestamp { get }
    var adUnitBytes: Text { get }
    var formatIdBytes: Text { get }
    var assetKeyBytes: Text? { get }
    var adapterBytes: Text? { get }
    var funnelPart: AdState.FunnelPart { get }
}

extension AdEvent: AdStateRecordSource {
    var packedId: PackedUUID { id }
    var adUnitBytes: String.UTF8View { adUnit.utf8 }
    var formatIdBytes: String.UTF8View { formatId.utf8 }
    var assetKeyBytes: String.UTF8View? { assetKey?.utf8 }
    var adapterBytes: String.UTF8View? { adapter?.utf8 }
    var funnelPart: AdState.FunnelPart { AdState.FunnelPart(self) }
}

extension AdEventRow: AdStateRecordSource {
    var packedId: PackedUUID { PackedUUID(binary: id) }
    var adUnitBytes: UnsafeRawBufferPointer { adUnit }
    var formatIdBytes: UnsafeRawBufferPointer { formatId }
    var assetKeyBytes: UnsafeRawBufferPointer? { assetKey }
    var adapterBytes: UnsafeRawBufferPointer? { adapter }
    var funnelPart: AdState.FunnelPart { funnel }
}

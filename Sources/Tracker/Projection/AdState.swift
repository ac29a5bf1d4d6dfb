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
/// ```
///
/// `sameUnitAndFormat` refers to the previous record of the same value; the encoder never sets
/// it on a value's first record. Migration 010's `tracker_unpack_ad_events` reads the layout in SQL.
enum AdState {
    enum Flag {
        static let eea: UInt8 = 1, reservation: UInt8 = 2, test: UInt8 = 4, hasAssetKey: UInt8 = 8,
                   hasAdapter: UInt8 = 16, sameUnitAndFormat: UInt8 = 32, labelled: UInt8 = 64
    }

    static let types = EventType.allCases
    static let sources = EventSource.allCases

    /// Appends `events` in the rules' order (corrected time, then id): equal lists give equal bytes,
    /// so a rebuilt `ad_state` equals the incremental one byte for byte.
    static func encode(_ events: [AdEvent], into out: inout [UInt8]) {
        let sorted = events.count > 1 ? events.sorted(by: AdEvent.earlier) : events
        var previous: AdEvent?
        for e in sorted {
            out.append(UInt8(truncatingIfNeeded: types.firstIndex(of: e.type) ?? 0))
            out.append(UInt8(truncatingIfNeeded: sources.firstIndex(of: e.source) ?? 0))
            var flags: UInt8 = 0
            if e.eea { flags |= Flag.eea }
            if e.reservation { flags |= Flag.reservation }
            if e.isTest { flags |= Flag.test }
            if e.assetKey != nil { flags |= Flag.hasAssetKey }
            if e.adapter != nil { flags |= Flag.hasAdapter }
            // By bytes: `String ==` would call two spellings of one text the same and store only the first.
            let same = previous.map { $0.adUnit.hasSameBytes(as: e.adUnit) && $0.formatId.hasSameBytes(as: e.formatId) } ?? false
            if same { flags |= Flag.sameUnitAndFormat }
            if e.label != nil { flags |= Flag.labelled }
            out.append(flags)
            if let label = e.label { out.append(UInt8(truncatingIfNeeded: IVTLabel.stored.firstIndex(of: label) ?? 0)) }
            out.appendBigEndian(e.id.high)
            out.appendBigEndian(e.id.low)
            out.appendBigEndian(e.correctedAt.microseconds)
            if !same {
                appendString(e.adUnit, to: &out)
                appendString(e.formatId, to: &out)
            }
            if let asset = e.assetKey { appendString(asset, to: &out) }
            if let adapter = e.adapter { appendString(adapter, to: &out) }
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
        return AdEvent(id: id, type: types[Int(typeIndex)], correctedAt: Timestamp(microseconds: micros),
                       adUnit: unit, formatId: format, assetKey: asset, source: sources[Int(sourceIndex)],
                       adapter: adapter, eea: flags & Flag.eea != 0, reservation: flags & Flag.reservation != 0,
                       isTest: flags & Flag.test != 0, label: label)
    }

    /// The test ad units as bytes, to recognise them without making a `String`.
    static let testAdUnits = AdEvent.testAdUnits.map { Array($0.utf8) }

    static func isTestAdUnit(_ bytes: UnsafeRawBufferPointer) -> Bool {
        testAdUnits.contains { $0.count == bytes.count && $0.elementsEqual(bytes) }
    }

    private static func appendString(_ s: String, to out: inout [UInt8]) {
        out.appendBigEndian(UInt16(truncatingIfNeeded: s.utf8.count))
        out.append(contentsOf: s.utf8)
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

extension ReportValue {
    /// The most bytes the value takes in JSON or CSV: a string escaped at its longest (a control
    /// character as `\u00XX`) and quoted, a count's 20 characters, a ratio's 32.
    var byteBound: Int {
        switch self {
        case .text(let s): 3 + 6 * s.utf8.count  // quotes, a formula guard, and JSON's worst escape per byte
        case .count: 20
        case .ratio: 32  // a Double's shortest form is at most 24 characters
        case .noDenominator, .missing: 4
        }
    }

    /// The value as it reads in JSON: ratios as numbers, one without a denominator as 0.
    var json: String {
        switch self {
        case .text(let s): s
        case .count(let n): String(n)
        case .ratio(let r): r.isFinite ? String(r) : "0"
        case .noDenominator: String(0.0)
        case .missing: "null"
        }
    }

    /// The value as it reads in CSV: ratios as numbers, an empty cell where there is none.
    var plain: String {
        switch self {
        case .noDenominator, .missing: ""
        default: json
        }
    }

    /// The value as a person reads it in a terminal: ratios as percentages with one decimal.
    var shown: String {
        switch self {
        case .ratio(let r): String(oneDecimal: r.isFinite ? r * 100 : 0) + " %"
        case .noDenominator, .missing: "–"
        default: plain
        }
    }
}

extension ReportResult {
    /// `{"from": …, "to": …, "ivtRules": N, "rows": [{…}]}` (docs/PROTOCOL.md, "Reports"); a
    /// report in another zone than UTC or by hour also names them (`"tz"`, `"granularity"`)
    /// after `to`. The projection lag travels in the HTTP headers, and on the command line's
    /// standard error.
    public var json: String {
        String(decoding: jsonBytes, as: UTF8.self)
    }

    /// `json` as UTF-8 bytes.
    public var jsonBytes: [UInt8] {
        Self.rendered(byteBound: jsonByteBound) { writeJSON(into: $0) }
    }

    /// The most bytes `json` can take (each string escaped at its longest): what a caller gives
    /// `writeJSON(into:)`.
    public var jsonByteBound: Int {
        let keys = jsonKeys.reduce(0) { $0 + $1.count }
        var bound = 160 + 6 * query.timeZone.utf8.count
        for row in rows {
            bound += 2 + row.count + keys
            for value in row { bound += value.byteBound }
        }
        return bound
    }

    /// Each column's name quoted, with its colon: every row repeats them.
    private var jsonKeys: [[UInt8]] {
        columns.map { name in
            var key: [UInt8] = []
            JSONText.appendQuoted(name, to: &key)
            key.append(UInt8(ascii: ":"))
            return key
        }
    }

    /// Writes `json` into `out`, which holds `jsonByteBound` bytes at least, and answers how many
    /// it wrote. An hourly report has thousands of rows: each byte is stored straight into the
    /// response's memory, not appended to a growing array and copied again.
    public func writeJSON(into out: UnsafeMutableRawBufferPointer) -> Int {
        var w = RawWriter(out)
        w.ascii("{\"from\":\"\(query.from)\",\"to\":\"\(query.to)\",")
        if query.timeZone != ReportQuery.defaultTimeZone || query.granularity != .day {
            w.ascii("\"tz\":")
            w.jsonString(query.timeZone)
            w.ascii(",\"granularity\":\"\(query.granularity.rawValue)\",")
        }
        w.ascii("\"ivtRules\":\(ivtRules),\"rows\":[")
        let keys = jsonKeys
        for (i, row) in rows.enumerated() {
            if i > 0 { w.byte(UInt8(ascii: ",")) }
            w.byte(UInt8(ascii: "{"))
            for (j, value) in row.enumerated() {
                if j > 0 { w.byte(UInt8(ascii: ",")) }
                w.bytes(keys[j])
                switch value {
                case .text(let s): w.jsonString(s)
                case .count(let n): w.decimal(n)
                case .ratio, .noDenominator, .missing: w.ascii(value.json)
                }
            }
            w.byte(UInt8(ascii: "}"))
        }
        w.ascii("]}")
        return w.count
    }

    /// RFC 4180 CSV with a header row, lines ended by "\n": one line per row.
    public var csv: String {
        csv(totals: false)
    }

    /// `csv`, ending with `totalsRow` when `totals` is set.
    public func csv(totals: Bool) -> String {
        String(decoding: csvBytes(totals: totals), as: UTF8.self)
    }

    /// `csv(totals:)` as UTF-8 bytes.
    public func csvBytes(totals: Bool = false) -> [UInt8] {
        Self.rendered(byteBound: csvByteBound) { writeCSV(into: $0, totals: totals) }
    }

    /// The most bytes `csv` can take, with its totals row: what a caller gives `writeCSV(into:totals:)`.
    public var csvByteBound: Int {
        var bound = columns.reduce(1) { $0 + $1.utf8.count + 1 }
        for row in rows {
            bound += row.count
            for value in row { bound += value.byteBound }
        }
        return bound + Self.totalLabel.utf8.count + columns.count * (1 + ReportValue.ratio(0).byteBound)
    }

    /// Writes `csv` into `out`, which holds `csvByteBound` bytes at least, as `writeJSON(into:)`
    /// writes JSON, and answers how many it wrote; with `totals`, `totalsRow` is the last line.
    public func writeCSV(into out: UnsafeMutableRawBufferPointer, totals: Bool = false) -> Int {
        var w = RawWriter(out)
        w.ascii(columns.joined(separator: ","))
        w.byte(UInt8(ascii: "\n"))
        func write(_ row: [ReportValue]) {
            for (j, value) in row.enumerated() {
                if j > 0 { w.byte(UInt8(ascii: ",")) }
                switch value {
                case .text(let s): w.csvField(s)
                case .count(let n): w.decimal(n)
                case .ratio, .noDenominator, .missing: w.ascii(value.plain)
                }
            }
            w.byte(UInt8(ascii: "\n"))
        }
        for row in rows { write(row) }
        if totals { write(totalsRow) }
        return w.count
    }

    /// What the totals row's first column says.
    public static let totalLabel = "Total"

    /// The rows added up, column by column as `totals` says: counts summed, ratios recomputed
    /// from the summed counts, percentiles empty, "Total" in the first column. The ad servers'
    /// own exports end with such a row; programs reading a CSV expect one line per row, so
    /// only the table and a CSV asked with totals have it.
    public var totalsRow: [ReportValue] {
        var sums: [String: Int64] = [:]
        for (i, (name, rule)) in zip(columns, totals).enumerated() where rule == .sum {
            sums[name] = rows.reduce(0) { total, row in
                guard case .count(let n) = row[i] else { return total }
                let (sum, overflow) = total.addingReportingOverflow(n)
                return overflow ? (n > 0 ? .max : .min) : sum
            }
        }
        return zip(columns, totals).enumerated().map { i, column in
            switch column.1 {
            case .label: i == 0 ? .text(Self.totalLabel) : .text("")
            case .sum: .count(sums[column.0] ?? 0)
            case .ratio(let numerator, let denominator):
                if let a = sums[numerator], let b = sums[denominator] { .ratio(of: a, over: b) } else { .missing }
            case .empty: .missing
            }
        }
    }

    private static func rendered(byteBound: Int, _ write: (UnsafeMutableRawBufferPointer) -> Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: byteBound) { buffer, count in
            count = write(UnsafeMutableRawBufferPointer(buffer))
        }
    }

    /// `s` as a CSV field (RFC 4180), as `RawWriter.csvField` writes it.
    static func csvField(_ s: String) -> String {
        String(decoding: rendered(byteBound: ReportValue.text(s).byteBound) { out in
            var w = RawWriter(out)
            w.csvField(s)
            return w.count
        }, as: UTF8.self)
    }

    /// Aligned columns for a terminal, dimensions left, numbers right, and the totals row last.
    public var table: String {
        guard let first = rows.first else { return TextTable.render([columns]) + "(no rows)\n" }
        let numeric = columns.indices.filter { i in
            if case .text = first[i] { false } else { true }
        }
        return TextTable.render([columns] + (rows + [totalsRow]).map { $0.map(\.shown) }, rightAligned: Set(numeric))
    }
}

/// The one rule CSV text follows against formulas (`RawWriter.csvField`).
enum CSVText {
    /// The mark put before a text cell a spreadsheet would read as a formula: `'`.
    static let guardMark = UInt8(ascii: "'")

    /// Whether a text cell starting with `byte` would be read as a formula: `=`, `+`, `-`, `@`,
    /// a tab or a carriage return.
    static func startsFormula(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "=") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "@")
            || byte == 0x09 || byte == 0x0D
    }
}

/// Stores bytes one after the other into memory sized beforehand (`jsonByteBound`,
/// `csvByteBound`): a bounds check per write, and neither the growth nor the copy-on-write
/// check of appending to an array.
struct RawWriter {
    private let base: UnsafeMutableRawBufferPointer
    private(set) var count = 0

    init(_ base: UnsafeMutableRawBufferPointer) { self.base = base }

    @inline(__always)
    mutating func byte(_ b: UInt8) {
        precondition(count < base.count, "report body larger than its bound")
        base[count] = b
        count &+= 1
    }

    mutating func bytes(_ bytes: UnsafeRawBufferPointer) {
        precondition(count + bytes.count <= base.count, "report body larger than its bound")
        guard let from = bytes.baseAddress, bytes.count > 0 else { return }
        (base.baseAddress! + count).copyMemory(from: from, byteCount: bytes.count)
        count += bytes.count
    }

    mutating func bytes(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { self.bytes($0) }
    }

    mutating func ascii(_ s: String) {
        var s = s
        s.withUTF8 { bytes(UnsafeRawBufferPointer($0)) }
    }

    /// `n`'s digits as `String(n)` writes them.
    mutating func decimal(_ n: Int64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: a sign and 19 digits fit
        withUnsafeMutableBytes(of: &digits) { scratch in
            var at = scratch.count
            var rest = n.magnitude
            repeat {
                at -= 1
                scratch[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            } while rest > 0
            if n < 0 {
                at -= 1
                scratch[at] = UInt8(ascii: "-")
            }
            bytes(UnsafeRawBufferPointer(rebasing: scratch[at...]))
        }
    }

    /// `s` as a JSON string literal.
    mutating func jsonString(_ s: String) {
        JSONText.writeQuoted(s) { bytes($0) }
    }

    /// `s` as a CSV text field: quoted, with quotes doubled, when it holds a comma, quote or line
    /// end (told by its bytes: a quote followed by a combining accent is still a quote to a
    /// reader); and, when it starts with `=`, `+`, `-`, `@`, a tab or a carriage return, after a
    /// `'`, so that a spreadsheet shows it as text instead of running it as a formula (OWASP's
    /// rule against CSV injection: an ad unit, asset key or adapter is whatever a client sent).
    /// Numbers are not text fields: they are written as they are.
    mutating func csvField(_ s: String) {
        var s = s
        s.withUTF8 { utf8 in
            let all = UnsafeRawBufferPointer(utf8)
            let guarded = utf8.first.map(CSVText.startsFormula) ?? false
            guard utf8.contains(where: { $0 == 0x2C || $0 == 0x22 || $0 == 0x0A || $0 == 0x0D }) else {
                if guarded { byte(CSVText.guardMark) }
                bytes(all)
                return
            }
            byte(0x22)
            if guarded { byte(CSVText.guardMark) }
            var run = 0
            for (i, b) in utf8.enumerated() where b == 0x22 {
                bytes(UnsafeRawBufferPointer(rebasing: all[run...i]))
                byte(0x22)
                run = i + 1
            }
            bytes(UnsafeRawBufferPointer(rebasing: all[run...]))
            byte(0x22)
        }
    }
}

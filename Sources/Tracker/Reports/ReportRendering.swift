extension ReportValue {
    /// The value as JSON into a response body's bytes: strings quoted, counts and ratios as
    /// numbers, written as in CSV (`plain`).
    func appendJSON(to out: inout [UInt8]) {
        switch self {
        case .text(let s): JSONText.appendQuoted(s, to: &out)
        case .count(let n): Self.appendDecimal(n, to: &out)
        case .ratio: out += plain.utf8
        }
    }

    /// `n`'s digits as `String(n)` writes them, straight into `out`: an hourly report writes
    /// tens of thousands of counts, and making a `String` of each costs more than its digits.
    static func appendDecimal(_ n: Int64, to out: inout [UInt8]) {
        if n < 0 { out.append(UInt8(ascii: "-")) }
        let first = out.count
        var rest = n.magnitude
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        out[first...].reverse()
    }

    /// The value as it reads in CSV (and JSON): ratios as numbers.
    var plain: String {
        switch self {
        case .text(let s): s
        case .count(let n): String(n)
        case .ratio(let r): r.isFinite ? String(r) : "0"
        }
    }

    /// The value as a person reads it in a terminal: ratios as percentages with one decimal.
    var shown: String {
        switch self {
        case .ratio(let r): String(oneDecimal: r.isFinite ? r * 100 : 0) + " %"
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

    /// `json` as UTF-8 bytes, built as bytes: a report by hour has thousands of rows, and
    /// appending them to a `String` piece by piece costs more than the query.
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128 + rows.count * columns.count * 24)
        out += "{\"from\":\"\(query.from)\",\"to\":\"\(query.to)\",".utf8
        if query.timeZone != ReportQuery.defaultTimeZone || query.granularity != .day {
            out += "\"tz\":".utf8
            JSONText.appendQuoted(query.timeZone, to: &out)
            out += ",\"granularity\":\"\(query.granularity.rawValue)\",".utf8
        }
        out += "\"ivtRules\":\(ivtRules),\"rows\":[".utf8
        // Each row repeats the column names: quoted once.
        let keys: [[UInt8]] = columns.map { name in
            var key: [UInt8] = []
            JSONText.appendQuoted(name, to: &key)
            key.append(UInt8(ascii: ":"))
            return key
        }
        for (i, row) in rows.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            for (j, value) in row.enumerated() {
                if j > 0 { out.append(UInt8(ascii: ",")) }
                out += keys[j]
                value.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        out += "]}".utf8
        return out
    }

    /// RFC 4180 CSV with a header row, lines ended by "\n".
    public var csv: String {
        var out = columns.joined(separator: ",") + "\n"
        for row in rows {
            out += row.map { Self.csvField($0.plain) }.joined(separator: ",") + "\n"
        }
        return out
    }

    static func csvField(_ s: String) -> String {
        guard s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return s }
        var quoted = "\""
        for ch in s { quoted += ch == "\"" ? "\"\"" : String(ch) }
        return quoted + "\""
    }

    /// Aligned columns for a terminal: dimensions left, numbers right.
    public var table: String {
        let numeric = columns.indices.filter { i in
            guard let first = rows.first else { return false }
            if case .text = first[i] { return false }
            return true
        }
        var out = TextTable.render([columns] + rows.map { $0.map(\.shown) }, rightAligned: Set(numeric))
        if rows.isEmpty { out += "(no rows)\n" }
        return out
    }
}

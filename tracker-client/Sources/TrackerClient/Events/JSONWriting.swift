import TrackerModel

/// The few pieces of JSON the client writes, by hand: the fields of one event and the batch
/// around them. Writing bytes directly keeps a record call to about a microsecond and the
/// stored record byte-for-byte what the server will read.
enum JSONWriting {
    /// `"text"` with the escapes JSON requires (quote, backslash, control characters); all
    /// other characters are written as UTF-8.
    static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: Array("\\u00".utf8))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `,"name":` (the comma unless it is the object's first member).
    static func appendKey(_ name: String, first: Bool = false, to out: inout [UInt8]) {
        if !first { out.append(UInt8(ascii: ",")) }
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: name.utf8)
        out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: ":")])
    }

    /// Whether `text` is a number as JSON writes it (`-12`, `4.20`, `1e-3`).
    static func isNumber(_ text: String) -> Bool {
        var bytes = text.utf8[...]
        func digits() -> Int {
            var n = 0
            while let b = bytes.first, b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") {
                bytes.removeFirst()
                n += 1
            }
            return n
        }
        if bytes.first == UInt8(ascii: "-") { bytes.removeFirst() }
        if bytes.first == UInt8(ascii: "0") {
            bytes.removeFirst()
        } else if digits() == 0 {
            return false
        }
        if bytes.first == UInt8(ascii: ".") {
            bytes.removeFirst()
            guard digits() > 0 else { return false }
        }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            bytes.removeFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes.removeFirst() }
            guard digits() > 0 else { return false }
        }
        return bytes.isEmpty
    }

    /// RFC 3339 in UTC with microseconds: `2026-11-20T10:00:01.950123Z`.
    static func appendTimestamp(micros: Int64, to out: inout [UInt8]) {
        let perDay: Int64 = 86_400_000_000
        let days = micros >= 0 ? micros / perDay : (micros - perDay + 1) / perDay
        let inDay = micros - days * perDay
        let (year, month, day) = CivilCalendar.date(days: Int(days))
        let seconds = inDay / 1_000_000
        func pad(_ value: Int64, _ width: Int) {
            var digits = [UInt8](repeating: UInt8(ascii: "0"), count: width)
            var v = value
            for i in stride(from: width - 1, through: 0, by: -1) {
                digits[i] = UInt8(ascii: "0") + UInt8(v % 10)
                v /= 10
            }
            out.append(contentsOf: digits)
        }
        pad(Int64(year), 4); out.append(UInt8(ascii: "-"))
        pad(Int64(month), 2); out.append(UInt8(ascii: "-"))
        pad(Int64(day), 2); out.append(UInt8(ascii: "T"))
        pad(seconds / 3600, 2); out.append(UInt8(ascii: ":"))
        pad(seconds / 60 % 60, 2); out.append(UInt8(ascii: ":"))
        pad(seconds % 60, 2); out.append(UInt8(ascii: "."))
        pad(inDay % 1_000_000, 6); out.append(UInt8(ascii: "Z"))
    }
}

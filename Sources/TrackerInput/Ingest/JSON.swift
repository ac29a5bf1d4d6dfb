/// A parsed JSON value, as strict RFC 8259 reads it.
///
/// Numbers keep the text they were written with, so an attribute like `4.20` or a
/// 20-digit id is stored exactly as the app sent it, never rounded through a `Double`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in the order they were written; a repeated key is kept twice (`member` takes the last).
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a.elementsEqual(b) { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// The last member named `key` of an object (as JavaScript's `JSON.parse` keeps it).
    package func member(_ key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key == key })?.value
    }

    /// The JSON type's name, for messages ("got a number").
    package var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

/// Why a body is not JSON; `description` says where, for the client's developer.
public struct JSONSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    public var description: String { "\(reason) at byte \(offset)" }
}

/// A strict, allocation-light JSON reader over UTF-8 bytes.
///
/// Strings must be valid UTF-8 (surrogate escapes must pair up), nesting is limited to
/// `maxDepth` so a hostile body cannot exhaust the stack, and nothing may follow the value.
package struct JSONReader {
    static let maxDepth = 64
    private let bytes: UnsafeBufferPointer<UInt8>
    private(set) var offset = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// Parses one whole document.
    package static func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> JSONValue {
        try parse(bytes, spanning: nil).value
    }

    /// Parses one whole document; when it is an object whose member `key` is an array, also
    /// returns the byte range of each of that array's elements (the last such member's).
    package static func parse(_ bytes: [UInt8], spanning key: String?) throws(JSONSyntaxError) -> (value: JSONValue, spans: [Range<Int>]?) {
        let result: Result<(value: JSONValue, spans: [Range<Int>]?), JSONSyntaxError> = bytes.withUnsafeBufferPointer { buffer in
            var reader = JSONReader(buffer)
            do throws(JSONSyntaxError) {
                reader.skipWhitespace()
                var spans: [Range<Int>]?
                let value = if let key, reader.peek(UInt8(ascii: "{")) {
                    try reader.object(depth: 1, spanning: key, spans: &spans)
                } else {
                    try reader.value(depth: 0)
                }
                try reader.end()
                return .success((value, spans))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    // MARK: Structure

    mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        skipWhitespace()
        guard offset < bytes.count else { throw fail("unexpected end of the body") }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return .array(try array(depth: depth + 1).map(\.value))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw unexpected()
        }
    }

    /// An array's elements with the byte range each was written in (for per-event size limits).
    mutating func array(depth: Int) throws(JSONSyntaxError) -> [(value: JSONValue, bytes: Range<Int>)] {
        guard depth <= Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth) levels") }
        offset += 1  // [
        var out: [(value: JSONValue, bytes: Range<Int>)] = []
        skipWhitespace()
        if peek(UInt8(ascii: "]")) { offset += 1; return out }
        while true {
            skipWhitespace()
            let start = offset
            let element = try value(depth: depth)
            out.append((element, start..<offset))
            skipWhitespace()
            guard offset < bytes.count else { throw fail("unterminated array") }
            if bytes[offset] == UInt8(ascii: ",") { offset += 1; continue }
            if bytes[offset] == UInt8(ascii: "]") { offset += 1; return out }
            throw unexpected(expecting: "',' or ']'")
        }
    }

    mutating func object(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        var unused: [Range<Int>]?
        return try object(depth: depth, spanning: nil, spans: &unused)
    }

    mutating func object(depth: Int, spanning key: String?, spans: inout [Range<Int>]?) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= Self.maxDepth else { throw fail("nesting deeper than \(Self.maxDepth) levels") }
        offset += 1  // {
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if peek(UInt8(ascii: "}")) { offset += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard peek(UInt8(ascii: "\"")) else { throw unexpected(expecting: "a member name in double quotes") }
            let name = try string()
            skipWhitespace()
            guard peek(UInt8(ascii: ":")) else { throw unexpected(expecting: "':'") }
            offset += 1
            skipWhitespace()
            if let spanned = key, name == spanned, peek(UInt8(ascii: "[")) {
                let elements = try array(depth: depth + 1)
                spans = elements.map(\.bytes)
                members.append((name, .array(elements.map(\.value))))
            } else {
                members.append((name, try value(depth: depth)))
            }
            skipWhitespace()
            guard offset < bytes.count else { throw fail("unterminated object") }
            if bytes[offset] == UInt8(ascii: ",") { offset += 1; continue }
            if bytes[offset] == UInt8(ascii: "}") { offset += 1; return .object(members) }
            throw unexpected(expecting: "',' or '}'")
        }
    }

    /// Fails unless only whitespace is left.
    mutating func end() throws(JSONSyntaxError) {
        skipWhitespace()
        if offset < bytes.count { throw unexpected(expecting: "the end of the body") }
    }

    mutating func skipWhitespace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case 0x20, 0x0A, 0x0D, 0x09: offset += 1
            default: return
            }
        }
    }

    func peek(_ byte: UInt8) -> Bool {
        offset < bytes.count && bytes[offset] == byte
    }

    // MARK: Scalars

    private mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let count = word.utf8CodeUnitCount
        guard offset + count <= bytes.count else { throw unexpected() }
        for i in 0..<count where bytes[offset + i] != word.utf8Start[i] { throw unexpected() }
        offset += count
    }

    private mutating func number() throws(JSONSyntaxError) -> String {
        let start = offset
        if peek(UInt8(ascii: "-")) { offset += 1 }
        guard offset < bytes.count, isDigit(bytes[offset]) else { throw fail("a number needs digits") }
        if bytes[offset] == UInt8(ascii: "0") {
            offset += 1
        } else {
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if peek(UInt8(ascii: ".")) {
            offset += 1
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw fail("a fraction needs digits") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if peek(UInt8(ascii: "e")) || peek(UInt8(ascii: "E")) {
            offset += 1
            if peek(UInt8(ascii: "+")) || peek(UInt8(ascii: "-")) { offset += 1 }
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw fail("an exponent needs digits") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
    }

    private func isDigit(_ b: UInt8) -> Bool {
        b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9")
    }

    /// A string; the fast path copies the bytes between the quotes when there is no escape.
    mutating func string() throws(JSONSyntaxError) -> String {
        offset += 1  // "
        let start = offset
        var allBits: UInt8 = 0
        while offset < bytes.count {
            let b = bytes[offset]
            if b == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(rebasing: bytes[start..<offset])
                offset += 1
                guard let s = Self.validString(raw, isASCII: allBits < 0x80) else { throw fail("a string is not valid UTF-8", at: start) }
                return s
            }
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw fail("a control character must be escaped inside a string") }
            allBits |= b
            offset += 1
        }
        return try escapedString(from: start)
    }

    /// The bytes as a String, or `nil` when they are not valid UTF-8.
    ///
    /// Decoding replaces invalid sequences with U+FFFD, so it is the identity exactly on valid
    /// input: comparing the result with the bytes validates them. ASCII needs no check.
    /// (`String(validating:as:)` does the same but, unspecialized, spent most of its time
    /// looking up generic metadata.)
    static func validString(_ raw: some Collection<UInt8>, isASCII: Bool) -> String? {
        let s = String(decoding: raw, as: UTF8.self)
        return isASCII || s.utf8.elementsEqual(raw) ? s : nil
    }

    private mutating func escapedString(from start: Int) throws(JSONSyntaxError) -> String {
        var out: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<offset]))
        while offset < bytes.count {
            let b = bytes[offset]
            switch b {
            case UInt8(ascii: "\""):
                offset += 1
                guard let s = Self.validString(out, isASCII: false) else { throw fail("a string is not valid UTF-8", at: start) }
                return s
            case UInt8(ascii: "\\"):
                offset += 1
                guard offset < bytes.count else { throw fail("unterminated string") }
                let e = bytes[offset]
                offset += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"): appendUTF8(try unicodeEscape(), to: &out)
                default: throw fail("unknown escape '\\\(Character(Unicode.Scalar(e)))'", at: offset - 2)
                }
            default:
                if b < 0x20 { throw fail("a control character must be escaped inside a string") }
                out.append(b)
                offset += 1
            }
        }
        throw fail("unterminated string", at: start - 1)
    }

    /// The scalar of `\uXXXX` (offset is past the `u`), pairing surrogates.
    private mutating func unicodeEscape() throws(JSONSyntaxError) -> Unicode.Scalar {
        let high = try hex4()
        if (0xD800...0xDBFF).contains(high) {
            guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u") else {
                throw fail("a high surrogate escape must be followed by a low one")
            }
            offset += 2
            let low = try hex4()
            guard (0xDC00...0xDFFF).contains(low) else { throw fail("a high surrogate escape must be followed by a low one") }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
        }
        guard let scalar = Unicode.Scalar(high) else { throw fail("a lone low surrogate escape") }
        return scalar
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt32 {
        guard offset + 4 <= bytes.count else { throw fail("\\u needs four hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = Hex.value(bytes[offset]) else { throw fail("\\u needs four hex digits") }
            value = value << 4 | UInt32(digit)
            offset += 1
        }
        return value
    }

    private func appendUTF8(_ scalar: Unicode.Scalar, to out: inout [UInt8]) {
        out.append(contentsOf: UTF8.encode(scalar)!)
    }

    // MARK: Errors

    private func fail(_ reason: String, at position: Int? = nil) -> JSONSyntaxError {
        JSONSyntaxError(offset: position ?? offset, reason: reason)
    }

    private func unexpected(expecting: String? = nil) -> JSONSyntaxError {
        guard offset < bytes.count else { return fail("unexpected end of the body") }
        let b = bytes[offset]
        let shown = b >= 0x20 && b < 0x7F ? "'\(Character(Unicode.Scalar(b)))'" : "byte 0x" + String(b, radix: 16)
        return fail("unexpected \(shown)" + (expecting.map { ", expected \($0)" } ?? ""))
    }
}

/// Writing JSON text: quoting strings with the escapes RFC 8259 requires.
public enum JSONText {
    /// Appends `s` as a JSON string literal, as UTF-8 bytes (what a response body is made of).
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        writeQuoted(s) { out.append(contentsOf: $0) }
    }

    /// `s` as a JSON string literal, as UTF-8 bytes handed to `write` piece by piece: the quotes,
    /// each run of bytes that needs no escape whole, and each escape.
    @inlinable
    public static func writeQuoted(_ s: String, _ write: (UnsafeRawBufferPointer) -> Void) {
        withUnsafeBytes(of: UInt8(0x22)) { write($0) }
        var s = s
        s.withUTF8 { utf8 in
            let bytes = UnsafeRawBufferPointer(utf8)
            var run = 0
            for (i, b) in utf8.enumerated() where b < 0x20 || b == 0x22 || b == 0x5C {
                write(UnsafeRawBufferPointer(rebasing: bytes[run..<i]))
                var escape: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0x5C, 0x75, 0x30, 0x30, Hex.digit(b >> 4), Hex.digit(b & 15))
                let short: UInt8? = switch b {
                case 0x22: 0x22
                case 0x5C: 0x5C
                case 0x0A: 0x6E
                case 0x0D: 0x72
                case 0x09: 0x74
                default: nil
                }
                if let short { escape.1 = short }
                withUnsafeBytes(of: &escape) { write(UnsafeRawBufferPointer(rebasing: $0[0..<(short == nil ? 6 : 2)])) }
                run = i + 1
            }
            write(UnsafeRawBufferPointer(rebasing: bytes[run...]))
        }
        withUnsafeBytes(of: UInt8(0x22)) { write($0) }
    }

    /// Appends `s` as a JSON string literal.
    public static func appendQuoted(_ s: String, to out: inout String) {
        out.append("\"")
        var needsEscape = false
        for b in s.utf8 where b < 0x20 || b == 0x22 || b == 0x5C {
            needsEscape = true
            break
        }
        if !needsEscape {
            out.append(s)
        } else {
            for scalar in s.unicodeScalars {
                switch scalar {
                case "\"": out.append("\\\"")
                case "\\": out.append("\\\\")
                case "\n": out.append("\\n")
                case "\r": out.append("\\r")
                case "\t": out.append("\\t")
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    out.append("\\u" + String(repeating: "0", count: 4 - hex.count) + hex)
                default: out.unicodeScalars.append(scalar)
                }
            }
        }
        out.append("\"")
    }
}

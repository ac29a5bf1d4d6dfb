/// A strict RFC 4180 reader over UTF-8 bytes: records of fields, numbered from 1.
///
/// Fields are separated by commas; a field may be quoted with `"` (inside, `""` is one quote,
/// and commas and line breaks are text); records end with CRLF or LF; a UTF-8 byte-order mark
/// at the start is skipped; an empty line is no record. Anything else a lenient reader would
/// guess at is an error naming the record: a quote inside an unquoted field, text after a
/// closing quote, a quote never closed, bytes that are not UTF-8. A billing import must
/// refuse a file it cannot read exactly rather than store a guess.
public struct CSVRecords: Sequence {
    let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public func makeIterator() -> Iterator {
        Iterator(bytes: bytes)
    }

    /// One record: its number (the first record is 1) and its fields, or why it cannot be read.
    public typealias Element = Result<(number: Int, fields: [String]), CSVError>

    public struct Iterator: IteratorProtocol {
        private let bytes: [UInt8]
        private var offset: Int
        private var number = 0
        private var failed = false

        init(bytes: [UInt8]) {
            self.bytes = bytes
            offset = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        }

        public mutating func next() -> Element? {
            guard !failed else { return nil }
            // Empty lines are no records.
            while offset < bytes.count, bytes[offset] == 0x0A || (bytes[offset] == 0x0D && offset + 1 < bytes.count && bytes[offset + 1] == 0x0A) {
                number += 1
                offset += bytes[offset] == 0x0D ? 2 : 1
            }
            guard offset < bytes.count else { return nil }
            number += 1
            var fields: [String] = []
            var field: [UInt8] = []
            while true {
                if offset < bytes.count, bytes[offset] == 0x22 {
                    // A quoted field: up to the closing quote; "" is a quote.
                    offset += 1
                    while true {
                        guard offset < bytes.count else { return fail(.unclosedQuote(record: number)) }
                        let b = bytes[offset]
                        if b == 0x22 {
                            if offset + 1 < bytes.count, bytes[offset + 1] == 0x22 {
                                field.append(0x22)
                                offset += 2
                                continue
                            }
                            offset += 1
                            break
                        }
                        field.append(b)
                        offset += 1
                    }
                    if offset < bytes.count, ![0x2C, 0x0A, 0x0D].contains(bytes[offset]) {
                        return fail(.textAfterQuote(record: number, field: fields.count + 1))
                    }
                } else {
                    while offset < bytes.count, bytes[offset] != 0x2C, bytes[offset] != 0x0A, bytes[offset] != 0x0D {
                        if bytes[offset] == 0x22 { return fail(.quoteInUnquotedField(record: number, field: fields.count + 1)) }
                        field.append(bytes[offset])
                        offset += 1
                    }
                }
                guard let text = String(validating: field, as: UTF8.self) else {
                    return fail(.notUTF8(record: number, field: fields.count + 1))
                }
                fields.append(text)
                field.removeAll(keepingCapacity: true)
                guard offset < bytes.count else { return .success((number, fields)) }
                switch bytes[offset] {
                case 0x2C:
                    offset += 1
                case 0x0A:
                    offset += 1
                    return .success((number, fields))
                default:  // CR: a record ends with CRLF; a lone CR is not a line break RFC 4180 knows
                    guard offset + 1 < bytes.count, bytes[offset + 1] == 0x0A else {
                        if offset + 1 == bytes.count { offset += 1; return .success((number, fields)) }
                        return fail(.loneCarriageReturn(record: number))
                    }
                    offset += 2
                    return .success((number, fields))
                }
            }
        }

        private mutating func fail(_ error: CSVError) -> Element {
            failed = true
            return .failure(error)
        }
    }
}

/// Why bytes are not RFC 4180 CSV; each names the record (the header is record 1) and, where
/// it helps, the field.
public enum CSVError: Error, Sendable, Equatable, CustomStringConvertible {
    case unclosedQuote(record: Int)
    case textAfterQuote(record: Int, field: Int)
    case quoteInUnquotedField(record: Int, field: Int)
    case notUTF8(record: Int, field: Int)
    case loneCarriageReturn(record: Int)

    public var record: Int {
        switch self {
        case .unclosedQuote(let r), .textAfterQuote(let r, _), .quoteInUnquotedField(let r, _), .notUTF8(let r, _),
             .loneCarriageReturn(let r): r
        }
    }

    public var description: String {
        switch self {
        case .unclosedQuote(let r): "row \(r): a quoted field is never closed (a \" without its closing \")"
        case .textAfterQuote(let r, let f): "row \(r), field \(f): text after a closing quote (write a quote inside a quoted field as \"\")"
        case .quoteInUnquotedField(let r, let f): "row \(r), field \(f): a \" inside a field that is not quoted (quote the field and double the \")"
        case .notUTF8(let r, let f): "row \(r), field \(f): not UTF-8 text (export the report as UTF-8 CSV)"
        case .loneCarriageReturn(let r): "row \(r): a carriage return that does not end a line (lines end with CRLF or LF)"
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension BatchDecoder {
    /// How many elements the body's `events` array holds, found by one pass over the bytes
    /// without building anything: what the rate limiter charges before the batch is decoded.
    ///
    /// For every body `decode` accepts, this is exactly its number of events (accepted plus
    /// rejected; the fuzz target checks it). For other bodies it may be any number or `nil`
    /// (no `events` array found, or an `events` key written with escapes, which only a full
    /// parse could compare): the caller then falls back to counting after decoding.
    public static func eventCount(in bytes: UnsafeRawBufferPointer) -> Int? {
        // Byte values as literals: `UInt8(ascii:)` is a call per use in a debug build, which
        // the test suites run.
        let quote: UInt8 = 0x22, backslash: UInt8 = 0x5C
        guard let base = bytes.baseAddress else { return nil }
        var scanner = EventCountScanner()
        var i = 0
        let n = bytes.count
        while i < n {
            let byte = bytes[i]
            guard byte == quote else {
                if scanner.byte(byte) { return scanner.count }
                i += 1
                continue
            }
            // A string: most of a batch's bytes are inside strings, so its closing quote is
            // found with memchr (fast even in a debug build), skipping escaped quotes.
            var end = i + 1
            while true {
                guard let quote = memchr(base + end, Int32(quote), n - end) else { return nil }
                end = base.distance(to: UnsafeRawPointer(quote))
                var backslashes = 0
                while bytes[end - 1 - backslashes] == backslash { backslashes += 1 }
                if backslashes % 2 == 0 { break }
                end += 1
            }
            if scanner.keyIsNext {
                let length = end - i - 1
                // A key with an escape might spell `events`: only a parse could tell.
                if memchr(base + i + 1, Int32(backslash), length) != nil { return nil }
                scanner.key(isEvents: length == 6 && memcmp(base + i + 1, "events", 6) == 0)
            } else {
                scanner.value()
            }
            i = end + 1
        }
        return nil
    }
}

/// The structure `eventCount` follows: nesting depth, whether a top-level key is expected,
/// and the elements of the (last) top-level `events` array.
private struct EventCountScanner {
    var depth = 0
    /// Inside the top-level object, a key comes next (after `{` or `,`).
    var expectingKey = false
    /// The last top-level key was `events` and its value has not started yet.
    var eventsValueNext = false
    /// Inside the top-level `events` array.
    var inEvents = false
    var commas = 0
    var sawElement = false
    var count: Int?

    /// The next string is a key of the top-level object.
    var keyIsNext: Bool { depth == 1 && expectingKey }

    /// A key of the top-level object was read.
    mutating func key(isEvents: Bool) {
        expectingKey = false
        eventsValueNext = isEvents
    }

    /// One byte outside strings; `true` when the top-level value has ended.
    mutating func byte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x20, 0x09, 0x0A, 0x0D, 0x3A:  // whitespace, `:`
            return false
        case 0x7B, 0x5B:  // `{`, `[`
            if depth == 1, eventsValueNext, byte == 0x5B {
                eventsValueNext = false
                inEvents = true
                commas = 0
                sawElement = false
            } else {
                value()
            }
            depth += 1
            if depth == 1 { expectingKey = byte == 0x7B }
            return false
        case 0x7D, 0x5D:  // `}`, `]`
            depth -= 1
            if inEvents, depth == 1 {
                inEvents = false
                count = sawElement ? commas + 1 : 0
            }
            return depth <= 0
        case 0x2C:  // `,`
            if depth == 1 {
                expectingKey = true
                eventsValueNext = false
            } else if inEvents, depth == 2 {
                commas += 1
            }
            return false
        default:
            value()  // a number, true, false or null
            return false
        }
    }

    /// A value (or the start of one): a string that is not a top-level key, a literal, `{` or `[`.
    mutating func value() {
        if depth == 1, eventsValueNext {
            // `events` is not an array: the decoder refuses the body, and a later `events` member may still come.
            eventsValueNext = false
            count = nil
        }
        if inEvents, depth == 2 { sawElement = true }
    }
}

/// Byte-level helpers for header values, which are ASCII in every case that matters here.
enum ASCII {
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
    }

    /// `bytes` without the spaces and tabs at either end.
    static func trimmingSpaces(_ bytes: Substring.UTF8View) -> Substring.UTF8View {
        var bytes = bytes
        while let b = bytes.first, b == 0x20 || b == 0x09 { bytes.removeFirst() }
        while let b = bytes.last, b == 0x20 || b == 0x09 { bytes.removeLast() }
        return bytes
    }
}

extension String {
    /// The string without the spaces and tabs at either end.
    var trimmingSpaces: String {
        String(Substring(ASCII.trimmingSpaces(Substring(self).utf8)))
    }
}

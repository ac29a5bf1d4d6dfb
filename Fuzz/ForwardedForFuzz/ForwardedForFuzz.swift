import TrackerInput

/// libFuzzer's entry point: one input is three lines, `peer NL X-Forwarded-For NL
/// TRACKER_TRUSTED_PROXIES`, read as the server reads them; a peer that is no address is
/// taken from the input's first 16 or 4 bytes instead.
///
/// Besides crashes and hangs, it checks PROTOCOL.md 8's rule and the address types' promises: an
/// untrusted peer is the client; the client is the peer or an address written in the header;
/// the range set answers like a linear scan of its ranges; every address and range that
/// parses anywhere in the input reads back from its canonical text, and truncation is a
/// network of the address.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzForwardedFor(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let text = String(decoding: input, as: UTF8.self)
    let lines = text.split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
    let peer = IPAddress(lines[0]) ?? IPAddress(bytes: input.prefix(16)) ?? IPAddress(bytes: input.prefix(4)) ?? IPAddress(ipv4: 0x0A00_0001)
    let header = lines.count > 1 ? lines[1] : nil
    let proxyText = lines.count > 2 ? lines[2] : ""

    let trusted: IPRangeSet
    var ranges: [CIDRRange] = []
    do {
        trusted = try ForwardedFor.trustedProxies(proxyText)
        for entry in proxyText.split(separator: ",") {
            let trimmed = entry.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
            if !trimmed.isEmpty, let range = CIDRRange(String(trimmed)) { ranges.append(range) }
        }
    } catch {
        precondition(!error.description.isEmpty, "a refused proxy list must say why")
        trusted = IPRangeSet(ranges)
    }

    let client = ForwardedFor.client(peer: peer, header: header, trustedProxies: trusted)
    if !trusted.contains(peer) || header == nil { precondition(client == peer, "the header was read from an untrusted peer") }
    if client != peer {
        precondition(addresses(writtenIn: header ?? "").contains(client), "the client \(client) is neither the peer nor in the header")
    }
    for probe in [peer, client] {
        precondition(trusted.contains(probe) == ranges.contains { $0.contains(probe) }, "the range set disagrees with its ranges on \(probe)")
    }

    // Round trips of every address and range written anywhere in the input.
    for token in text.split(whereSeparator: { $0 == "\n" || $0 == "," || $0 == " " }) {
        if let a = IPAddress(token) {
            precondition(IPAddress(a.description) == a, "\(token) does not read back from \(a)")
            precondition(IPAddress(bytes: a.bytes) == a && a.bytes.count == (a.family == .v4 ? 4 : 16))
            let t = a.truncated()
            precondition(t.truncated() == t && t.family == a.family)
            precondition(CIDRRange(address: a, prefixLength: a.family == .v4 ? 24 : 48)?.network == t, "truncation is not the /24 or /48")
        }
        if let r = CIDRRange(token) {
            precondition(CIDRRange(r.description) == r, "\(token) does not read back from \(r)")
            precondition(r.contains(r.network) && IPRangeSet([r]).contains(r.network))
        }
    }
    return 0
}

/// Every address an entry of the header may name: the entry itself, inside brackets, or
/// before a port.
func addresses(writtenIn header: String) -> Set<IPAddress> {
    var found = Set<IPAddress>()
    for entry in header.split(separator: ",") {
        let e = entry.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()
        let text = String(e)
        var candidates = [text]
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") { candidates.append(String(text[text.index(after: text.startIndex)..<close])) }
        if let colon = text.firstIndex(of: ":") { candidates.append(String(text[..<colon])) }
        for candidate in candidates { if let a = IPAddress(candidate) { found.insert(a) } }
    }
    return found
}

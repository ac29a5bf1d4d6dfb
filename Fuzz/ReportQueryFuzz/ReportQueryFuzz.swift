import TrackerInput

/// libFuzzer's entry point: one input is a report request's path tail and query string,
/// `NAME?from=…&to=…&adUnit=…`, read as `GET /v1/reports/NAME?…` reads it: the raw query
/// checked for NUL and invalid UTF-8, then split, percent-decoded and given to
/// `ReportQuery.parse`.
///
/// Besides crashes, it checks what PROTOCOL.md 6 promises of any request: a refused one says why;
/// an accepted one asks for one of the four reports, a range of 1 to 366 UTC days in order,
/// and no empty filter.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReportQuery(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    let (report, rawQuery) = text.firstIndex(of: "?").map { (String(text[..<$0]), String(text[text.index(after: $0)...])) } ?? (text, "")
    if let problem = ReportQuery.unreadableParameter(rawQuery: rawQuery) {
        precondition(!problem.description.isEmpty, "a refused query must say why")
        return 0
    }
    // The first value of each name, as Hummingbird's queryParameters.get gives it.
    var parameters: [String: String] = [:]
    for (name, value) in ReportQuery.decodedPairs(rawQuery: rawQuery) {
        let name = String(decoding: name, as: UTF8.self)
        if parameters[name] == nil { parameters[name] = String(decoding: value, as: UTF8.self) }
    }
    let query: ReportQuery
    do {
        query = try ReportQuery.parse(report: report, parameter: { parameters[$0] })
    } catch {
        precondition(!error.description.isEmpty, "a refused query must say why")
        if case .unknownReport = error { precondition(ReportKind(rawValue: report) == nil, "a known report refused as unknown") }
        return 0
    }
    precondition(query.kind.rawValue == report, "answered another report than the one asked")
    precondition(query.from <= query.to, "from after to")
    let days = Int(query.to.daysSinceEpoch) - Int(query.from.daysSinceEpoch) + 1
    precondition(days >= 1 && days <= ReportQuery.maxDays, "a range of \(days) days")
    precondition(query.adUnit.map { !$0.isEmpty } ?? true, "an empty adUnit filter")
    precondition(query.formatId.map { !$0.isEmpty } ?? true, "an empty formatId filter")
    precondition(Day(iso: parameters["from"] ?? "") == query.from && Day(iso: parameters["to"] ?? "") == query.to,
                 "the range is not the days sent")
    precondition(query.includeTest == ["true", "1"].contains(parameters["includeTest"]?.lowercased() ?? ""),
                 "includeTest is not what was sent")
    return 0
}

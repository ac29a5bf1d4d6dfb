import TrackerInput

/// libFuzzer's entry point: one input is an Ad Manager report export as `POST
/// /v1/reconciliations` receives it (and, from its first NUL on, a unit map).
///
/// Besides crashes and hangs, it checks what an import promises of any bytes: a refusal says
/// why and names a row; an accepted file gives rows numbered after the header, in order, with
/// real days and counts of 0 or more; the reader and the parser agree on the records.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReconciliationImport(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let split = bytes.firstIndex(of: 0) ?? bytes.count
    let file = Array(bytes[..<split]), unitMap = split < bytes.count ? Array(bytes[(split + 1)...]) : []

    var numbers: [Int] = []
    var readerFailed = false
    for record in CSVRecords(file) {
        switch record {
        case .success(let r):
            precondition(r.number > (numbers.last ?? 0), "records are numbered in order")
            numbers.append(r.number)
        case .failure(let error):
            precondition(error.record >= 1 && !error.description.isEmpty, "a CSV error names its row")
            readerFailed = true
        }
    }
    do {
        let report = try AdManagerReport.parse(file)
        precondition(!readerFailed, "a file the reader refuses cannot be imported")
        var last = 1
        for row in report.rows {
            precondition(row.row > last, "rows come after the header, in order")
            last = row.row
            precondition(row.impressions >= 0 && row.clicks >= 0, "counts are 0 or more")
            precondition(!row.adUnit.isEmpty, "every row names an ad unit")
            precondition(Day(iso: row.day.description) == row.day, "every day is a real date")
        }
    } catch {
        precondition(!error.description.isEmpty, "a refused file says why")
    }
    do {
        let map = try AdUnitMap.parse(unitMap)
        for path in map.paths.values { precondition(path.hasPrefix("/"), "a unit map maps names to paths") }
    } catch {
        precondition(!error.description.isEmpty, "a refused unit map says why")
    }
    return 0
}

import Testing
@testable import Tracker

/// A half-day row keeps only the running counts that change, and gives back every one of its
/// 49 running counts from them.
struct QuarterBlockTests {
    /// Dense running counts (49 × width) from the events of each quarter hour.
    private func running(_ perQuarter: [Int: [Int64]], width: Int) -> [Int64] {
        var values = [Int64](repeating: 0, count: QuarterBlock.counts * width)
        var sum = [Int64](repeating: 0, count: width)
        for k in 0..<Int(QuarterBlock.quarters) {
            for m in 0..<width { sum[m] += perQuarter[k]?[m] ?? 0 }
            for m in 0..<width { values[(k + 1) * width + m] = sum[m] }
        }
        return values
    }

    @Test func aRowPaysOnlyForTheQuarterHoursThatHadEvents() {
        let width = 3
        let values = running([0: [1, 0, 0], 30: [0, 2, 0], 47: [0, 0, 5]], width: width)
        var bytes: [UInt8] = []
        let mask = QuarterBlock.compact(values, width: width, into: &bytes)
        #expect(mask == 1 << 0 | 1 << 30 | 1 << 47)
        #expect(bytes.count == 3 * width * 8)
    }

    @Test func everyRunningCountIsReadBackThroughTheMask() {
        let width = 2
        let values = running([3: [1, 4], 4: [2, 0], 20: [0, 1], 47: [7, 7]], width: width)
        var bytes: [UInt8] = []
        let mask = QuarterBlock.compact(values, width: width, into: &bytes)
        bytes.withUnsafeBytes { stored in
            for element in 0..<QuarterBlock.counts {
                let entry = QuarterBlock.entry(mask, element: element)
                for m in 0..<width {
                    let read = entry < 0 ? 0 : QuarterBlock.value(stored, entry * width + m)
                    #expect(read == values[element * width + m], "running count \(element) of measure \(m)")
                }
            }
            var expanded = [Int64](repeating: -1, count: values.count)
            QuarterBlock.expand(mask: mask, counts: stored, width: width, into: &expanded)
            #expect(expanded == values)
        }
    }

    @Test func aRowWithNoEventsIsEmpty() {
        var bytes: [UInt8] = [1, 2, 3]
        #expect(QuarterBlock.compact(running([:], width: 4), width: 4, into: &bytes) == 0)
        #expect(bytes.isEmpty)
    }

    @Test func countsThatDoNotMatchTheMaskAreRefused() {
        #expect(QuarterBlock.fits(mask: 0b101, counts: 2 * 3 * 8, width: 3))
        #expect(!QuarterBlock.fits(mask: 0b101, counts: 3 * 3 * 8, width: 3))
        #expect(!QuarterBlock.fits(mask: 1 << 48, counts: 3 * 8, width: 3))
    }
}

/// Every table's measures fit the lanes of a row's vector: a measure past them would be added
/// to nothing and silently lost.
struct MeasureLaneTests {
    @Test(arguments: ProjectionTable.allCases)
    func theTablesMeasuresFitTheirLanes(_ table: ProjectionTable) {
        #expect(table.measureColumns.count <= Measures.scalarCount,
                "\(table): \(table.measureColumns.count) measures, \(Measures.scalarCount) lanes")
    }
}

/// A table whose full half-day row goes to TOAST keeps its totals inline: without them a report
/// by local day pays two lookups in TOAST per row (docs/PERFORMANCE.md, "Reports").
struct InlineTotalsTests {
    @Test(arguments: ProjectionTable.allCases)
    func wideRowsKeepTheirTotalsInline(_ table: ProjectionTable) {
        let fullRow = Int(QuarterBlock.quarters) * table.measureColumns.count * 8
        #expect(table.keepsTotalsInline == (fullRow > 8160 - 200),
                "\(table): a full row's counts take \(fullRow) bytes; keepsTotalsInline is \(table.keepsTotalsInline)")
    }
}

import Testing
import TrackerInput
@testable import Tracker

/// The reports' specs fit what sums their local-time slices: a report given a fourth key
/// column would fail every local-time request with an unreadable half-day row.
struct ReportSpecTests {
    @Test(arguments: ReportKind.allCases)
    func everyReportsKeyFitsTheSlicesSum(kind: ReportKind) throws {
        let spec = try #require(ReportSQL.specs[kind])
        #expect(spec.dimensions.first == "day")
        #expect((1...LocalSegments.Segments.Key.maxDimensions).contains(spec.dimensions.count - 1),
                "\(kind): \(spec.dimensions.count - 1) key columns")
    }
}

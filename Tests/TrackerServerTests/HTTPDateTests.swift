import Testing
@testable import TrackerServer

struct HTTPDateTests {
    @Test func answersAreDatedAsRFC9110Says() {
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.format(1_795_910_400) == "Sun, 29 Nov 2026 00:00:00 GMT")
        #expect(HTTPDate.now().hasSuffix(" GMT"))
    }
}

/// Time as a test sets it: instants are offsets from an arbitrary zero, and nothing moves
/// unless the test advances it, so deadlines are checked to the microsecond without waiting.
struct TestInstant: InstantProtocol {
    var offset: Duration

    static let zero = TestInstant(offset: .zero)

    func advanced(by duration: Duration) -> TestInstant { TestInstant(offset: offset + duration) }
    func duration(to other: TestInstant) -> Duration { other.offset - offset }
    static func < (a: TestInstant, b: TestInstant) -> Bool { a.offset < b.offset }
}

/// A clock the test advances by hand.
struct ManualClock {
    private(set) var now = TestInstant.zero

    mutating func advance(by duration: Duration) { now = now.advanced(by: duration) }
}

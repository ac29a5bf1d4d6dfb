import Foundation

/// A value behind a lock, reached only inside `withLock`.
///
/// `Synchronization.Mutex` needs iOS 18; apps that show ads support older systems, so this
/// wraps `NSLock`, which every platform the library targets has.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is read and written only inside `withLock`, which holds `lock`
    // for the whole closure, so no two threads ever touch it at once; `lock` is immutable.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

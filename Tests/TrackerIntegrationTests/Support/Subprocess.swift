import Foundation

/// A child process started with `posix_spawn` and reaped with `waitpid`.
///
/// Foundation's `Process` on Linux can leave a finished child unreaped and hang in
/// `waitUntilExit` when several tests start processes at once; this wrapper has no
/// monitor thread to race with. Waiting happens on a thread of its own, never on Swift's
/// cooperative pool, so a test that waits for a child does not starve the others.
final class Subprocess: @unchecked Sendable {
    // @unchecked: `status` is guarded by `lock`; `pid` is immutable.
    let pid: pid_t
    private let lock = NSLock()
    private var status: Int32?

    /// Starts `path` with `arguments`; output goes to `outputPath` (appended) or /dev/null.
    init(_ path: String, _ arguments: [String], environment: [String: String]? = nil,
         inputPath: String? = nil, outputPath: String? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, inputPath ?? "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = [path] + arguments
        var child: pid_t = 0
        let rc = withCStringArray(argv) { cArgv in
            withCStringArray(env) { cEnv in posix_spawn(&child, path, &actions, nil, cArgv, cEnv) }
        }
        guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO) }
        pid = child
    }

    /// Runs a command to its end and returns its exit status.
    static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil,
                    inputPath: String? = nil, outputPath: String? = nil) async throws -> Int32 {
        try await Subprocess(path, arguments, environment: environment, inputPath: inputPath, outputPath: outputPath).exitStatus()
    }

    /// Waits for the child to end; its exit code, or 128 + the signal that ended it.
    func exitStatus() async -> Int32 {
        if let status = lock.withLock({ status }) { return status }
        // A thread of its own: GCD's global queues are capped near the core count on Linux, and
        // children waited on by several tests at once could take every thread, starving the
        // very tests that would end them (a whole run hung at 0 % CPU that way).
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: self.waitBlocking()) }
        }
    }

    /// Waits for the child to end, blocking the calling thread.
    func waitBlocking() -> Int32 {
        lock.lock()
        defer { lock.unlock() }
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
        let result = (raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
        status = result
        return result
    }

    var isRunning: Bool {
        lock.withLock {
            if status != nil { return false }
            var raw: Int32 = 0
            let r = waitpid(pid, &raw, WNOHANG)
            if r == pid {
                status = (raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : 128 + (raw & 0x7F)
                return false
            }
            return r == 0
        }
    }

    func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }
}

private func withCStringArray<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { for p in pointers { free(p) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

#if canImport(Glibc)
import Glibc
#endif

/// libFuzzer's entry point for one input.
public typealias FuzzTarget = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
typealias FuzzDriverFunction = @convention(c) (UnsafeMutablePointer<Int32>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>, FuzzTarget) -> Int32

/// Runs libFuzzer's driver over `target` with the process's arguments, and exits with its status.
///
/// SwiftPM links an executable's entry point as `main`, which hides libFuzzer's own `main`:
/// each target's `main.swift` calls this instead.
public func runFuzzer(_ target: FuzzTarget) -> Never {
    // RTLD_DEFAULT (nil on glibc): the executable itself, whose symbols SwiftPM exports.
    guard let symbol = dlsym(nil, "LLVMFuzzerRunDriver") else {
        print("LLVMFuzzerRunDriver not found: build with -sanitize=fuzzer (scripts/fuzz.sh)")
        exit(2)
    }
    let driver = unsafeBitCast(symbol, to: FuzzDriverFunction.self)
    var argc = CommandLine.argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
    exit(driver(&argc, &argv, target))
}

#if canImport(Glibc)
import Glibc
#endif

// SwiftPM links an executable's entry point as `main`, which hides libFuzzer's own `main`:
// this one hands control to libFuzzer's driver with the same arguments and the target.
typealias FuzzTarget = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
typealias FuzzDriver = @convention(c) (UnsafeMutablePointer<Int32>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>, FuzzTarget) -> Int32

// RTLD_DEFAULT (nil on glibc): the executable itself, whose symbols SwiftPM exports.
guard let symbol = dlsym(nil, "LLVMFuzzerRunDriver") else {
    print("LLVMFuzzerRunDriver not found: build with -sanitize=fuzzer (scripts/fuzz.sh)")
    exit(2)
}
let driver = unsafeBitCast(symbol, to: FuzzDriver.self)
var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(driver(&argc, &argv, { data, size in fuzzReportQuery(data!, size) }))

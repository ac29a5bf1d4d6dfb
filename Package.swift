// swift-tools-version:6.2
import PackageDescription

/// One settings list for every target: Swift 6 mode, explicit existentials,
/// and imports that say where each member comes from.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "tracker",
    platforms: [.macOS(.v15), .iOS(.v16)],
    products: [
        .executable(name: "tracker", targets: ["TrackerMain"]),
        .library(name: "Tracker", targets: ["Tracker"]),
    ],
    dependencies: [
        // TrackerClient is a package of its own (apps depend on it alone and resolve none of
        // the packages below); the server takes the wire vocabulary and zlib from it.
        .package(path: "tracker-client"),
        // Neither of Hummingbird's default traits (swift-configuration's ConfigReader, full
        // Foundation for URL-encoded forms) is used. With two traits on, SwiftPM writes their
        // -D flags in a hash order drawn anew whenever it plans a build, and a flipped order
        // recompiles Hummingbird and HummingbirdCore from scratch though nothing changed.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        // The domain's values and the batch decoder: pure Swift over TrackerModel, no database,
        // no crypto, no logging. The libFuzzer target links only this (a fuzz build in seconds,
        // not minutes of BoringSSL under the sanitizer).
        .target(
            name: "TrackerInput",
            dependencies: [.product(name: "TrackerModel", package: "tracker-client")],
            swiftSettings: swiftSettings
        ),
        // libpq under Swift: connections, the pool (a Service), results, binary arrays and
        // errors. No tracker schema or rule lives here.
        .target(
            name: "TrackerPostgres",
            dependencies: [
                "CLibPQ",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // NIOThreadPool: the threads every blocking libpq call runs on.
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Tracker",
            dependencies: [
                .product(name: "TrackerModel", package: "tracker-client"),
                "TrackerInput",
                // libpq only through TrackerPostgres: no domain file can reach a raw handle.
                "TrackerPostgres",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The rebuild's projecting threads (NIOThreadPool) and their hand-over (ConditionLock).
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The server and its commands as a library, so tests drive the HTTP routes in process
        // (HummingbirdTesting); `tracker` itself is the thin executable after it.
        .target(
            name: "TrackerServer",
            dependencies: [
                "Tracker",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "CTrackerZlib", package: "tracker-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "TrackerMain",
            dependencies: ["TrackerServer"],
            swiftSettings: swiftSettings
        ),
        // `make bench-json`: the hand-written JSON bodies against JSONEncoder (docs/PERFORMANCE.md).
        .executableTarget(
            name: "TrackerJSONBench",
            dependencies: ["TrackerServer", "Tracker", "TrackerInput"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TrackerTests",
            dependencies: ["Tracker", "TrackerInput", "TrackerPostgres"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TrackerServerTests",
            dependencies: [
                "TrackerServer", .product(name: "TrackerClient", package: "tracker-client"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TrackerIntegrationTests",
            dependencies: [
                "Tracker", "TrackerServer", .product(name: "TrackerClient", package: "tracker-client"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)

// libFuzzer targets (scripts/fuzz.sh, docs/RELIABILITY.md): only when TRACKER_FUZZ is set, so
// normal builds never see them. Built with -sanitize=fuzzer,address in .build-fuzz.
if Context.environment["TRACKER_FUZZ"] != nil {
    // Hands control to libFuzzer's driver (SwiftPM's `main` hides libFuzzer's own).
    package.targets.append(.target(name: "FuzzDriver", path: "Fuzz/FuzzDriver", swiftSettings: swiftSettings))
    for (name, path) in [("BatchDecoderFuzz", "Fuzz/BatchDecoderFuzz"), ("ReportQueryFuzz", "Fuzz/ReportQueryFuzz"),
                         ("RuleSetFuzz", "Fuzz/RuleSetFuzz"), ("ForwardedForFuzz", "Fuzz/ForwardedForFuzz"),
                         ("ReconciliationImportFuzz", "Fuzz/ReconciliationImportFuzz")] {
        package.targets.append(.executableTarget(
            name: name,
            dependencies: ["TrackerInput", "FuzzDriver"],
            path: path,
            swiftSettings: swiftSettings,
            // main.swift finds libFuzzer's driver with dlsym: make the linker take it from the archive.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--undefined=LLVMFuzzerRunDriver",
                                           "-Xlinker", "--export-dynamic-symbol=LLVMFuzzerRunDriver"])]))
    }
}

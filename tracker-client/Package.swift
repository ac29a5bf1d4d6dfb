// swift-tools-version:6.0
import PackageDescription

// TrackerClient as a package of its own, so that an app depending on it resolves and builds
// nothing but this folder: no manifest of the server's packages is ever read (docs/CLIENT.md,
// "Adding the package"). Foundation, the system's zlib and the wire vocabulary only; the
// tracker at the repository's root depends on this package by path for TrackerModel and
// CTrackerZlib, so those sources exist once.

/// The same settings as the root package's: Swift 6 mode, explicit existentials, and imports
/// that say where each member comes from.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "tracker-client",
    platforms: [.macOS(.v15), .iOS(.v16)],
    products: [
        // What apps and services link to send events.
        .library(name: "TrackerClient", targets: ["TrackerClient"]),
        // For the tracker itself: the wire vocabulary its decoder checks events against, and
        // zlib for its request bodies. An app gets TrackerModel through TrackerClient.
        .library(name: "TrackerModel", targets: ["TrackerModel"]),
        .library(name: "CTrackerZlib", targets: ["CTrackerZlib"]),
    ],
    targets: [
        // The vocabulary of the wire protocol, shared by the client and the server; no dependencies.
        .target(
            name: "TrackerModel",
            swiftSettings: swiftSettings
        ),
        // zlib ships with every Apple SDK and with Debian's zlib1g-dev.
        .systemLibrary(
            name: "CTrackerZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .target(
            name: "TrackerClient",
            dependencies: ["TrackerModel", "CTrackerZlib"],
            swiftSettings: swiftSettings
        ),
        // A small program over TrackerClient that the tracker's integration tests kill
        // mid-delivery and that scripts/bench-client.sh measures.
        .executableTarget(
            name: "TrackerClientProbe",
            dependencies: ["TrackerClient"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "TrackerClientTests",
            dependencies: ["TrackerClient", "CTrackerZlib"],
            swiftSettings: swiftSettings
        ),
    ]
)

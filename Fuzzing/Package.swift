// swift-tools-version:6.1
// Fanfare's libFuzzer targets: one executable per parser that takes bytes from outside (a hostile server,
// a client, a file). A separate package so the sanitizer flags stay out of the main package; it depends on
// the main package by path. Build and run them with scripts/fuzz (README.md).
import PackageDescription

/// One fuzz target in Sources/<name>/: libFuzzer's `LLVMFuzzerTestOneInput`, no `main` (libFuzzer has it).
func fuzzTarget(_ name: String, _ fanfare: [String], local: [Target.Dependency] = []) -> Target {
    .executableTarget(
        name: name,
        dependencies: ["FuzzSupport"] + local + fanfare.map { .product(name: $0, package: "Fanfare") },
        swiftSettings: [.swiftLanguageMode(.v6)]
    )
}

let package = Package(
    name: "FanfareFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Fanfare", path: ".."),
    ],
    targets: [
        .target(name: "CLibFuzzer"),
        // nghttp2's HPACK, the reference FuzzHPACK checks ours against.
        .systemLibrary(name: "CNghttp2Reference", pkgConfig: "libnghttp2"),
        .target(name: "FuzzSupport", dependencies: ["CLibFuzzer"], swiftSettings: [.swiftLanguageMode(.v6)]),
        // What the two HTTP/2 session targets share: the frame-checking transport and frame builders.
        .target(
            name: "FuzzHTTP2Support", dependencies: ["FuzzSupport", .product(name: "FanfareHTTP2", package: "Fanfare")],
            swiftSettings: [.swiftLanguageMode(.v6)]),
        fuzzTarget("FuzzDeviceToken", ["FanfareCore"]),
        fuzzTarget("FuzzHPACK", ["FanfareHTTP2"], local: ["CNghttp2Reference"]),
        fuzzTarget("FuzzClientSession", ["FanfareHTTP2"], local: ["FuzzHTTP2Support"]),
        fuzzTarget("FuzzServerSession", ["FanfareHTTP2"], local: ["FuzzHTTP2Support"]),
        fuzzTarget("FuzzProxyResponse", ["FanfareHTTP2"]),
        fuzzTarget("FuzzSimulatorRequest", ["FanfareSimulator", "FanfareCore"]),
        fuzzTarget("FuzzJSON", ["FanfareCore"]),
        // FanfareTLS is not a product of the main package; it comes in with FanfareSimulator.
        fuzzTarget("FuzzPEM", ["FanfareSimulator"]),
        fuzzTarget("FuzzJWT", ["FanfareSimulator"]),
    ]
)

// swift-tools-version:6.1
// Fanfare's benchmarks: a separate package so the benchmark dependency (and its malloc interposer) stays out of
// the main package. Run them with ./run (see README.md).
import PackageDescription

let package = Package(
    name: "FanfareBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "PayloadEncoding",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "FanfareCore", package: "main"),
            ],
            path: "Benchmarks/PayloadEncoding",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)

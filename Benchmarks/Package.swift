// swift-tools-version:6.1
// Fanfare's benchmarks: wall time, throughput and malloc counts of the per-push pieces, with committed malloc
// thresholds (Thresholds/). A separate package so the benchmark dependency and its malloc interposer stay out
// of the main package. Run everything with ./run; README.md lists the commands.
import PackageDescription

/// One executable per area in Benchmarks/<name>/, discovered and run by the benchmark plugin.
func benchmarkTarget(_ name: String, _ fanfare: [String]) -> Target {
    .executableTarget(
        name: name,
        dependencies: [.product(name: "Benchmark", package: "benchmark")]
            + fanfare.map { .product(name: $0, package: "Fanfare") },
        path: "Benchmarks/\(name)",
        swiftSettings: [.swiftLanguageMode(.v6)],
        plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    )
}

let package = Package(
    name: "FanfareBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Fanfare", path: ".."),  // named: a path package is otherwise known by its folder name
        // The malloc interposer trait backs mallocCountTotal on Swift 6.3 (no jemalloc needed).
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        benchmarkTarget("PayloadEncoding", ["FanfareCore"]),
        benchmarkTarget("RequestBuilding", ["FanfareClient", "FanfareHTTP2", "FanfareCore"]),
        benchmarkTarget("ProviderTokenReuse", ["FanfareClient", "FanfareTLS", "FanfareCore"]),
        benchmarkTarget("QueueHandoff", ["FanfareIO", "FanfareClient", "FanfareCore"]),
        benchmarkTarget("ResponseParsing", ["FanfareHTTP2", "FanfareCore"]),
        benchmarkTarget("ServerSession", ["FanfareHTTP2"]),
        benchmarkTarget("ClientRoundTrip", ["FanfareClient", "FanfareTLS", "FanfareSimulator", "FanfareCore"]),
        benchmarkTarget("FanoutShard", ["FanfareFanout"]),
    ]
)

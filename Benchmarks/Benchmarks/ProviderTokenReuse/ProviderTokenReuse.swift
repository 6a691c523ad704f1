// What a request pays for the shared provider token (JWT): connections check `generation` per push and call
// `snapshot()` only when it changed; workers call `current()` about once a second so the token gets re-minted.
// With a long refresh interval none of these should allocate (a returned ProviderToken retains its Strings,
// it does not copy them). One `ProviderTokenSigner.mint` is measured separately: it allocates and costs far
// more, which is why a token is minted once per 40 minutes and never per request.
import Benchmark
import FanfareClient
import FanfareTLS
import Foundation

let benchmarks: @Sendable () -> Void = {
    // 1000 reads per iteration (the `*` rows are per read); about 1 s per benchmark.
    let perRead = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    Benchmark("Generation", configuration: perRead) { benchmark, keys in
        let source = keys.source
        for _ in benchmark.scaledIterations {
            blackHole(source.generation)
        }
    } setup: {
        try ProviderKeys()
    }

    Benchmark("Current", configuration: perRead) { benchmark, keys in
        let source = keys.source
        for _ in benchmark.scaledIterations {
            let token = source.current()
            blackHole(token.issuedAt)
        }
    } setup: {
        try ProviderKeys()
    }

    Benchmark("Snapshot", configuration: perRead) { benchmark, keys in
        let source = keys.source
        for _ in benchmark.scaledIterations {
            let (token, generation) = source.snapshot()
            blackHole(generation &+ UInt64(truncatingIfNeeded: token.issuedAt))
        }
    } setup: {
        try ProviderKeys()
    }

    // One ES256 signature per iteration. Minting is a control-plane cost, so its malloc count (OpenSSL's) is
    // gated loosely: 10% either way.
    Benchmark(
        "MintOneToken",
        configuration: .init(
            metrics: [.wallClock, .throughput, .mallocCountTotal],
            warmupIterations: 10,
            scalingFactor: .one,
            maxDuration: .seconds(1),
            maxIterations: 10_000,
            thresholds: [.mallocCountTotal: BenchmarkThresholds(relative: [.p90: 10.0])]
        )
    ) { benchmark, keys in
        let token = try keys.signer.mint(issuedAt: 1_735_689_600 + Int64(benchmark.currentIteration))
        blackHole(token.jwt.utf8.count)
    } setup: {
        try ProviderKeys()
    }
}

/// A fresh provider key (written to a temporary directory, which is removed again) and a token source with
/// the longest refresh interval APNs allows, so nothing re-mints while measuring.
final class ProviderKeys {
    let signer: ProviderTokenSigner
    let source: ProviderTokenSource

    init() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("fanfare-bench-keys-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let privateKey = directory + "/AuthKey_BENCH00001.p8"
        try ProviderKeyGenerator.generate(privateKeyFile: privateKey, publicKeyFile: directory + "/AuthKey_BENCH00001.pub.pem")
        signer = try ProviderTokenSigner(privateKeyPEMFile: privateKey, keyID: "BENCH00001", teamID: "TEAMID0001")
        source = ProviderTokenSource(signer: signer, refreshInterval: 60 * 60)
        // Warm-up outside the measurement: the first lock and the first copy of the token.
        precondition(source.current().jwt.isEmpty == false && source.generation == 1)
    }
}

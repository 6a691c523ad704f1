// The fan-out engine's own per-push work, on a real shard with 10,000 80-byte tokens: walk the channel's
// audience, check the token's state and priority budget, build the push (shared payload bytes, token copied
// inline), then account the 200. No network (ClientRoundTrip covers the wire). Expected: 0 mallocs per push;
// the few allocations of starting a wave (wave object, payload, tallies) happen outside the measurement.
import Benchmark
@_spi(Benchmarks) import FanfareFanout

let benchmarks: @Sendable () -> Void = {
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 3,
        maxDuration: .seconds(2),
        maxIterations: 1_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    // One iteration = one wave to 10,000 tokens (wallClock is per wave; divide by 10,000 for per push).
    // The next wave is published after the measurement stops, so only the fan-out itself is measured.
    Benchmark("WaveTo10kTokens", configuration: configuration) { (benchmark: Benchmark, probe: ShardProbe) in
        let pushes = probe.drain()
        benchmark.stopMeasurement()
        precondition(pushes == 10_000, "a wave reached \(pushes) of 10,000 tokens")
        blackHole(pushes)
        try probe.publish()
    } setup: {
        let probe = try ShardProbe(tokens: 10_000)
        try probe.publish()
        return probe
    }
}

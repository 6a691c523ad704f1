// Reading an APNs answer: a 200 has no body and goes straight to `PushOutcome.classify(status: 200, body: nil)`;
// an error answer carries `{"reason":"…"}` that `APNsErrorBody.parse` reads into a `String?`. A reason of up to
// 15 UTF-8 bytes fits Swift's inline small-string form; a longer one ("ExpiredProviderToken", 20 bytes) needs
// one heap allocation per parsed error. Both are measured and gated at what they cost today.
import Benchmark
import FanfareCore

let benchmarks: @Sendable () -> Void = {
    // 1000 parses or classifications per iteration (the `*` rows are per operation); about 1 s each. Malloc
    // counts are exact here, so no tolerance: any change from Thresholds/ fails the check.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    Benchmark(
        "Classify200NoBody", configuration: configuration
    ) { benchmark, _ in
        for iteration in benchmark.scaledIterations {
            // The status comes from the wire; keep the optimizer from folding the call away.
            let outcome = PushOutcome.classify(status: 200 &+ (iteration & 0x1000), body: nil)
            blackHole(outcome.isDelivered)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseUnregistered", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let body = APNsErrorBody.parse(bodies.unregistered)
            blackHole(body?.timestamp)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseExpiredProviderToken", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let body = APNsErrorBody.parse(bodies.expiredProviderToken)
            blackHole(body?.reason?.utf8.count)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "Classify410Unregistered", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let outcome = PushOutcome.classify(status: 410, body: bodies.parsedUnregistered)
            blackHole(outcome.action)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseAndClassify410", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let outcome = PushOutcome.classify(status: 410, body: APNsErrorBody.parse(bodies.unregistered))
            blackHole(outcome.action)
        }
    } setup: {
        ErrorBodies()
    }
}

/// Response bodies as they arrive from nghttp2: bytes in a buffer the connection owns.
final class ErrorBodies {
    let unregistered: UnsafeRawBufferPointer
    let expiredProviderToken: UnsafeRawBufferPointer
    let parsedUnregistered: APNsErrorBody

    init() {
        unregistered = Self.copy(#"{"reason":"Unregistered","timestamp":1735689600000}"#)
        expiredProviderToken = Self.copy(#"{"reason":"ExpiredProviderToken"}"#)
        parsedUnregistered = APNsErrorBody.parse(unregistered)!
        precondition(parsedUnregistered.knownReason == .unregistered && parsedUnregistered.timestamp == 1_735_689_600_000)
        precondition(APNsErrorBody.parse(expiredProviderToken)?.knownReason == .expiredProviderToken)
    }

    private static func copy(_ text: String) -> UnsafeRawBufferPointer {
        let bytes = Array(text.utf8)
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        storage.copyBytes(from: bytes)
        return UnsafeRawBufferPointer(storage)
    }

    deinit {
        UnsafeMutableRawBufferPointer(mutating: unregistered).deallocate()
        UnsafeMutableRawBufferPointer(mutating: expiredProviderToken).deallocate()
    }
}

// The Live Activity payload encoder on the per-push path: content and RawJSON are built once, outside the
// measured loop, and every iteration encodes into the same buffer. Expected: 0 mallocs per encode.
import Benchmark
import FanfareCore

let benchmarks: @Sendable () -> Void = {
    // 1000 encodes per iteration (the `*` rows are per encode); about 1 s per benchmark.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    Benchmark("EncodeUpdateIntoRawBuffer", configuration: configuration) { benchmark, fixture in
        for _ in benchmark.scaledIterations {
            let count = try LiveActivityPayloadEncoder.encode(fixture.update, into: fixture.buffer)
            blackHole(fixture.buffer[count - 1])
        }
    } setup: {
        try PayloadFixture()
    }

    Benchmark("EncodeStartIntoRawBuffer", configuration: configuration) { benchmark, fixture in
        for _ in benchmark.scaledIterations {
            let count = try LiveActivityPayloadEncoder.encode(fixture.start, into: fixture.buffer)
            blackHole(fixture.buffer[count - 1])
        }
    } setup: {
        try PayloadFixture()
    }

    Benchmark("EncodeUpdateIntoPayloadBuffer", configuration: configuration) { benchmark, fixture in
        for _ in benchmark.scaledIterations {
            let bytes = try fixture.payloadBuffer.encode(fixture.update)
            blackHole(bytes[bytes.count - 1])
        }
    } setup: {
        try PayloadFixture()
    }
}

/// Everything the encode loops read, built before measuring: RawJSON validation and String storage allocate.
final class PayloadFixture {
    let update: LiveActivityContent
    let start: LiveActivityContent
    /// 64-byte aligned like `PayloadBuffer`, one byte over the largest limit.
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: PayloadLimits.broadcast + 1, alignment: 64)
    let payloadBuffer = PayloadBuffer()

    init() throws {
        let state = try RawJSON(validating: #"{"home":2,"away":1,"minute":63,"period":"2H","scorer":"Ödegaard"}"#)
        update = LiveActivityContent(
            event: .update, timestamp: 1_735_689_600, contentState: state, staleDate: 1_735_693_200,
            relevanceScore: 75)
        start = LiveActivityContent(
            event: .start, timestamp: 1_735_689_600,
            contentState: try RawJSON(validating: #"{"home":0,"away":0,"minute":0,"period":"1H"}"#),
            staleDate: 1_735_696_800, relevanceScore: 100,
            alert: LiveActivityAlert(
                title: .plain("Kick-off: Arsenal vs Chelsea"),
                body: .localized(key: "MATCH_STARTED_BODY", args: ["Arsenal", "Chelsea", "Emirates Stadium"]),
                sound: "whistle.caf"),
            attributesType: "MatchAttributes",
            attributes: try RawJSON(validating: #"{"matchID":"EPL-2025-0412","home":"ARS","away":"CHE","venue":"Emirates"}"#),
            inputPushToken: true)
        // Encoding must succeed before anything is measured (this throws otherwise).
        let updateCount = try LiveActivityPayloadEncoder.encode(update, into: buffer)
        let startCount = try LiveActivityPayloadEncoder.encode(start, into: buffer)
        precondition(updateCount > 0 && startCount > updateCount)
    }

    deinit {
        buffer.deallocate()
    }
}

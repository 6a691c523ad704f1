// The per-push header values the client writes into a stream slot before nghttp2_submit_request:
// `:path` = /3/device/<lowercase hex token>, a fresh `apns-id`, and `apns-expiration` in decimal.
// Expected: 0 mallocs.
import Benchmark
import FanfareCore

let benchmarks: @Sendable () -> Void = {
    // 1000 operations per iteration (the `*` rows are per operation); about 1 s per benchmark.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    Benchmark("DevicePath", configuration: configuration) { benchmark, slot in
        for _ in benchmark.scaledIterations {
            let count = slot.writePath()
            blackHole(slot.path.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try HeaderSlot()
    }

    Benchmark("APNsID", configuration: configuration) { benchmark, slot in
        for _ in benchmark.scaledIterations {
            slot.writeAPNsID()
            blackHole(slot.apnsID.load(fromByteOffset: APNsIDGenerator.byteCount - 1, as: UInt8.self))
        }
    } setup: {
        try HeaderSlot()
    }

    Benchmark("ExpirationDecimal", configuration: configuration) { benchmark, slot in
        for iteration in benchmark.scaledIterations {
            let count = slot.writeExpiration(1_735_689_600 + Int64(iteration))
            blackHole(slot.expiration.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try HeaderSlot()
    }

    Benchmark("AllHeaderValues", configuration: configuration) { benchmark, slot in
        for iteration in benchmark.scaledIterations {
            let pathCount = slot.writePath()
            slot.writeAPNsID()
            let expirationCount = slot.writeExpiration(1_735_689_600 + Int64(iteration))
            blackHole(pathCount &+ expirationCount)
            blackHole(slot.apnsID.load(fromByteOffset: APNsIDGenerator.byteCount - 1, as: UInt8.self))
        }
    } setup: {
        try HeaderSlot()
    }
}

/// Stands in for one of `APNsConnection`'s stream slots: fixed buffers allocated once, written per push.
final class HeaderSlot {
    static let pathPrefix: StaticString = "/3/device/"

    let token: DeviceToken
    var identifiers = APNsIDGenerator(seed: 0xFA4FA4E)
    let path = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 64)
    let apnsID = UnsafeMutableRawPointer.allocate(byteCount: 40, alignment: 8)
    let expiration = UnsafeMutableRawBufferPointer.allocate(byteCount: 24, alignment: 8)

    init() throws {
        // 80 bytes, the length Live Activity tokens have in practice.
        token = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        precondition(Self.pathPrefix.utf8CodeUnitCount + token.hexCount <= 256)
    }

    deinit {
        path.deallocate()
        apnsID.deallocate()
        expiration.deallocate()
    }

    /// As `APNsConnection.submit`: prefix, then the token's lowercase hex right after it.
    @inline(__always)
    func writePath() -> Int {
        let prefixCount = Self.pathPrefix.utf8CodeUnitCount
        path.copyMemory(from: Self.pathPrefix.utf8Start, byteCount: prefixCount)
        return prefixCount + token.writeLowercaseHex(to: path + prefixCount)
    }

    @inline(__always)
    func writeAPNsID() {
        identifiers.write(to: apnsID)
    }

    /// The client's own decimal writer (`APNsConnection.writeDecimal`) is internal, so this measures the public
    /// allocation-free integer writer of the same digits (`JSONWriter.int`) instead.
    @inline(__always)
    func writeExpiration(_ seconds: Int64) -> Int {
        var writer = JSONWriter(buffer: expiration)
        writer.int(seconds)
        assert(!writer.overflowed)
        return writer.count
    }
}

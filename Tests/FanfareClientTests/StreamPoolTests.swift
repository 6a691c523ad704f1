// The simulator never refuses a stream within the limit it advertised: with 16 connections each at the full
// SETTINGS_MAX_CONCURRENT_STREAMS, its request pool grows (a chunk at a time) instead of refusing. (It used
// to keep a fixed pool of 8 connections' worth and refused the rest with REFUSED_STREAM.)
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct StreamPoolTests {
    /// 16 connections × 250 streams (a scaled 16 × 1000): 4000 streams at once on one simulator thread, twice
    /// the old fixed pool (8 × 250), and not one refused.
    @Test func sixteenFullConnectionsGetNoRefusedStream() async throws {
        let connections = 16
        let limit = 250
        var simulator = SimulatorConfiguration()
        simulator.maxConcurrentStreams = limit
        simulator.latency = .fixed(nanoseconds: 500_000_000)  // every stream stays open until all are
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = connections
        configuration.pendingCapacityPerWorker = 1 << 14
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = connections * limit * 2
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count, timeout: .seconds(60)))
        await harness.shutdown()

        let results = collector.byCookie()
        #expect(results.count == count)
        #expect(results.values.allSatisfy { $0.isDelivered })
        #expect(results.values.allSatisfy { $0.resends == 0 }, "nothing was refused, so nothing was resent")
        let stats = harness.simulator.statistics()
        #expect(stats.streamsRefused == 0, "\(stats.summary())")
        #expect(stats.accepted == count)
        #expect(
            stats.maxStreamsInUse > 8 * limit,
            "more streams at once than the old fixed pool held: \(stats.maxStreamsInUse)")
        #expect(stats.maxStreamsInUse <= connections * limit)
        #expect(stats.streamPoolGrowths > 0)
        #expect(harness.simulator.streamConcurrency().maxOpenStreams == limit)
    }

    /// `maxStreamsPerWorker` is the one way to refuse below the advertised limit (a memory bound the operator
    /// sets): the pool stops there, the rest is refused, and every push is still accounted for.
    @Test func anExplicitWorkerCapRefusesAboveItAndLosesNothing() async throws {
        var simulator = SimulatorConfiguration()
        simulator.maxConcurrentStreams = 200
        simulator.latency = .fixed(nanoseconds: 100_000_000)
        let harness = try TestHarness(simulator, maxStreamsPerWorker: 256)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 4
        configuration.maxResends = 100
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 2000
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count, timeout: .seconds(60)))
        await harness.shutdown()
        let results = collector.byCookie()
        #expect(results.count == count)
        let delivered = results.values.filter(\.isDelivered).count
        let stats = harness.simulator.statistics()
        #expect(stats.maxStreamsInUse == 256, "\(stats.summary())")
        #expect(stats.streamPoolGrowths == 0)
        #expect(stats.streamsRefused > 0)
        #expect(stats.accepted == delivered)
        #expect(delivered > count / 2, "\(delivered) of \(count) delivered")
    }
}

// A fresh token-auth connection carries one request until its first 200, then fans out to the server's
// SETTINGS_MAX_CONCURRENT_STREAMS (apns-spec.md §1.3); a limit dropped back to one loses nothing.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct StreamLimitTests {
    private func burst(
        _ harness: TestHarness, configuration: ClientConfiguration, count: Int
    ) async throws -> (APNsClient, ResultCollector) {
        let collector = ResultCollector()
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        try await submitAll(
            client,
            (0..<count).map {
                PushJob(token: makeToken($0 % 64), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        #expect(await collector.waitFor(count: count))
        return (client, collector)
    }

    @Test(arguments: [1, 100])
    func oneRequestBeforeTheFirst200ThenFanOut(initialStreams: Int) async throws {
        var simulator = SimulatorConfiguration()
        simulator.initialMaxConcurrentStreams = initialStreams
        simulator.maxConcurrentStreams = 1000
        simulator.latency = .fixed(nanoseconds: 100_000_000)  // keeps the burst's streams open together
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let count = 400
        let (_, collector) = try await burst(harness, configuration: try harness.clientConfiguration(), count: count)
        #expect(collector.all.allSatisfy { $0.isDelivered })
        let seen = harness.simulator.streamConcurrency()
        #expect(seen.maxOpenStreamsBeforeFirstAccept == 1, "streams open before the first 200: \(seen)")
        #expect(seen.maxOpenStreams > 50, "the client fanned out after the first 200: \(seen)")
        #expect(seen.maxOpenStreams <= 1000)
    }

    /// The probe above can see a client that does not wait: with the rule off, it opens many streams at once.
    @Test func withoutFirstRequestAloneTheClientOpensMoreAtOnce() async throws {
        var simulator = SimulatorConfiguration()
        simulator.initialMaxConcurrentStreams = 100
        // The first 200 comes long after the SETTINGS, however slowly a loaded machine runs the burst (scaled).
        let latency = TestTime.scaled(.seconds(1)).components
        simulator.latency = .fixed(
            nanoseconds: latency.seconds * 1_000_000_000 + latency.attoseconds / 1_000_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.firstRequestAlone = false
        let (_, collector) = try await burst(harness, configuration: configuration, count: 200)
        #expect(collector.all.allSatisfy { $0.isDelivered })
        #expect(harness.simulator.streamConcurrency().maxOpenStreamsBeforeFirstAccept > 1)
    }

    @Test func clientCapBelowTheServerLimitIsRespected() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 5_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.maxConcurrentStreamsPerConnection = 7
        let (_, collector) = try await burst(harness, configuration: configuration, count: 100)
        #expect(collector.all.allSatisfy { $0.isDelivered })
        let seen = harness.simulator.streamConcurrency()
        #expect(seen.maxOpenStreams <= 7 && seen.maxOpenStreams > 1, "\(seen)")
    }

    @Test func dropToOneAfterRejectionStillAccountsForEveryPush() async throws {
        var simulator = SimulatorConfiguration()
        simulator.dropStreamsToOneAfterRejection = true
        simulator.faults = [
            FaultRule(reason: .tooManyRequests, probability: 0.05),
            FaultRule(reason: .badDeviceToken, probability: 0.03),
            FaultRule(reason: .unregistered, probability: 0.02),
        ]
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 3_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        let count = 2000
        let (client, collector) = try await burst(harness, configuration: configuration, count: count)
        let results = collector.byCookie()
        #expect(results.count == count)
        let delivered = results.values.filter(\.isDelivered).count
        let rejected = results.values.filter { $0.disposition.rejectionReason != nil }.count
        let failed = results.values.filter { $0.disposition.failure != nil }
        #expect(failed.isEmpty, "\(failed.prefix(3).map(\.disposition))")
        #expect(delivered + rejected + failed.count == count)
        #expect(rejected > 0, "the faults fired")
        let stats = client.statistics
        #expect(stats.delivered == delivered && stats.rejected == rejected && stats.completed == count)
        await harness.shutdown()
        let server = harness.simulator.statistics()
        #expect(server.accepted == delivered)
        #expect(server.totalRejections == rejected)
    }
}

// Under load with mixed faults and latency, every submitted push produces exactly one result and both
// sides agree on the totals.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct AccountingTests {
    @Test func everyPushEndsExactlyOnceUnderLoadWithFaults() async throws {
        var simulator = SimulatorConfiguration()
        simulator.faults = [
            FaultRule(reason: .tooManyRequests, probability: 0.003),
            FaultRule(reason: .unregistered, probability: 0.003),
            FaultRule(reason: .internalServerError, probability: 0.002),
            FaultRule(reason: .badDeviceToken, probability: 0.002),
        ]
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 2_000_000)
        let harness = try TestHarness(simulator, threads: 2)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.workerCount = 2
        configuration.connectionsPerWorker = 2
        configuration.maxConcurrentStreamsPerConnection = 200
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 20_000
        try await submitAll(
            client,
            (0..<count).map {
                PushJob(token: makeToken($0 % 2000), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        #expect(await collector.waitFor(count: count, timeout: .seconds(60)))

        let results = collector.byCookie()
        #expect(collector.count == count, "one result per push")
        #expect(Set(results.keys) == Set((0..<UInt64(count))), "every cookie came back")
        var delivered = 0, rejected = 0, failed = 0
        var byReason: [APNsReason: Int] = [:]
        for result in results.values {
            switch result.disposition {
            case .delivered: delivered += 1
            case .rejected(_, let reason, _, _, _):
                rejected += 1
                if let reason { byReason[reason, default: 0] += 1 }
            case .failed: failed += 1
            }
        }
        #expect(delivered + rejected + failed == count)
        #expect(failed == 0, "nothing should fail locally here")
        #expect(rejected > 0 && delivered > count * 9 / 10)
        #expect(Set(results.values.map(\.apnsID.description)).count == count)

        let stats = client.statistics
        #expect(stats.submitted == count && stats.completed == count)
        #expect(stats.delivered == delivered && stats.rejected == rejected && stats.failed == failed)
        #expect(await eventually { client.statistics.inFlight == 0 && client.statistics.pending == 0 })

        await harness.shutdown()
        let server = harness.simulator.statistics()
        #expect(server.accepted == delivered)
        #expect(server.totalRejections == rejected)
        #expect(server.totalResponses == count)
        for (reason, number) in byReason { #expect(server.count(of: reason) == number, "\(reason)") }
        #expect(try harness.acceptedLog().count == delivered)
    }

    /// Near-limit payloads: flow-control windows and the transport's back-pressure are exercised.
    @Test func burstOfLargePayloadsIsDeliveredIntact() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 1_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        var content = LiveActivityContent(event: .update, timestamp: Int64(Date().timeIntervalSince1970))
        let filler = String(repeating: "abcdefghij", count: 390)
        content.contentState = try RawJSON(validating: #"{"log":"\#(filler)"}"#)
        let payload = try PushPayload(liveActivity: content)
        #expect(payload.count > 3900 && payload.count <= 4096)
        let count = 600
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0 % 50), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count))
        #expect(collector.byCookie().values.allSatisfy { $0.isDelivered })
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.accepted == count)
        #expect(stats.acceptedPayloadBytes == count * payload.count)
        let log = try harness.acceptedLog()
        #expect(log.count == count)
        #expect(log.allSatisfy { $0.hasPayload(payload.text) })
    }
}

// A full worker inbox makes `submit` throw `.backPressure`; nothing accepted is dropped.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct BackPressureTests {
    @Test func fullInboxThrowsBackPressureAndAcceptedPushesAllComplete() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 50_000_000)  // the first 200 takes a while: the queues fill
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.inboxCapacityPerWorker = 2
        configuration.pendingCapacityPerWorker = 4
        configuration.maxConcurrentStreamsPerConnection = 4
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()

        var accepted: [UInt64] = []
        var refused = 0
        for index in 0..<200 {
            do {
                try client.submit(PushJob(token: makeToken(index), payload: payload, cookie: UInt64(index)))
                accepted.append(UInt64(index))
            } catch .backPressure(let worker) {
                #expect(worker == 0)
                refused += 1
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
        #expect(refused > 0, "a 2-slot inbox in front of a 4-push queue cannot take 200 pushes at once")
        #expect(accepted.count + refused == 200)
        #expect(await collector.waitFor(count: accepted.count))
        // Give a stray extra result a chance to show up before counting.
        try await Task.sleep(for: .milliseconds(100))
        let results = collector.byCookie()
        #expect(Set(results.keys) == Set(accepted), "exactly the accepted pushes produced results")
        #expect(results.values.allSatisfy { $0.isDelivered })
        #expect(client.statistics.submitted == accepted.count)

        // Once drained, the client takes pushes again.
        let again = try await client.send(PushJob(token: makeToken(999), payload: payload, cookie: 999))
        #expect(again.isDelivered)
    }
}

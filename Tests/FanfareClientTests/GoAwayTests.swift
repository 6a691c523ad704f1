// GOAWAY in the middle of a burst: streams above last-stream-id go to a new connection, the rest get their
// answers on the old one, and nothing is delivered twice or lost (apns-spec.md §1.5).
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct GoAwayTests {
    /// Checks that every push of `count` was delivered exactly once on both sides.
    private func expectDeliveredExactlyOnce(
        _ harness: TestHarness, _ collector: ResultCollector, count: Int,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let results = collector.byCookie(sourceLocation: sourceLocation)
        #expect(collector.count == count, sourceLocation: sourceLocation)
        #expect(results.count == count, sourceLocation: sourceLocation)
        let undelivered = results.values.filter { !$0.isDelivered }
        #expect(undelivered.isEmpty, "\(undelivered.prefix(3).map(\.disposition))", sourceLocation: sourceLocation)
        let ids = results.values.map(\.apnsID.description)
        #expect(Set(ids).count == count, "apns-ids are unique per push", sourceLocation: sourceLocation)

        let stats = harness.simulator.statistics()
        #expect(
            stats.accepted == count, "simulator accepted \(stats.accepted) for \(count) delivered",
            sourceLocation: sourceLocation)
        #expect(stats.totalRejections == 0, sourceLocation: sourceLocation)
        let logged = try harness.acceptedLog().compactMap { $0.string("apns-id") }
        #expect(logged.count == count, "accepted-push log lines", sourceLocation: sourceLocation)
        #expect(Set(logged).count == logged.count, "no push accepted twice", sourceLocation: sourceLocation)
        #expect(Set(logged) == Set(ids), sourceLocation: sourceLocation)
    }

    @Test func goAwayAfterFiftyStreamsLosesAndDuplicatesNothing() async throws {
        var simulator = SimulatorConfiguration()
        simulator.goAwayAfterStreams = 50
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.maxResends = 20  // a push may be refused by several GOAWAYs in a row
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 1000
        try await submitAll(
            client,
            (0..<count).map {
                PushJob(token: makeToken($0 % 100), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        #expect(await collector.waitFor(count: count))
        let opened = client.statistics.connectionsOpened
        await harness.shutdown()
        // Every connection but the last one of each slot decided 50 pushes before its GOAWAY (and the
        // simulator's own shutdown may add a GOAWAY to each of those last ones).
        let goAways = harness.simulator.statistics().goAwaysSent
        #expect(goAways >= count / 50 - 2, "\(goAways) GOAWAYs")
        #expect(opened >= count / 50, "the client opened a successor after each GOAWAY (\(opened) opened)")
        try expectDeliveredExactlyOnce(harness, collector, count: count)
    }

    /// A server that ends every connection with a GOAWAY after 50 streams: each successor starts with at most twice
    /// what its predecessor got answered, so the backlog is not framed, sent and refused again on every connection.
    /// Before, each successor took the whole backlog (the server's limit is 1000) and refused all but 50 of it: about
    /// 9,500 resends for 1,000 pushes, and on a saturated machine that resent work starved the successors' handshakes
    /// until the pushes' deadlines passed.
    @Test func successorsAfterEarlyGoAwaysAreNotFloodedWithTheBacklog() async throws {
        var simulator = SimulatorConfiguration()
        simulator.goAwayAfterStreams = 50
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.maxResends = 20
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 1000
        try await submitAll(
            client,
            (0..<count).map {
                PushJob(token: makeToken($0 % 100), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        #expect(await collector.waitFor(count: count))
        #expect(collector.all.allSatisfy { $0.isDelivered })
        // The two first connections take the whole burst (about 950 refused between them); each successor at most
        // twice the 50 its predecessor served.
        let resends = client.statistics.resends
        #expect(resends <= 3 * count, "\(resends) resends for \(count) pushes")
    }

    @Test func goAwayOnEveryConnectionDuringABurst() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 1_000_000_000)  // the burst stays in flight for a second
        simulator.initialMaxConcurrentStreams = 1000
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.firstRequestAlone = false  // the whole burst goes out at once
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let burst = 1500
        try await submitAll(
            client,
            (0..<burst).map {
                PushJob(token: makeToken($0 % 100), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        // Both connections up on both sides (a loaded machine may still be opening the second one; the client can
        // count it established before the simulator's session for it starts, and a GOAWAY goes only to the
        // connections the simulator has) and the burst on them.
        let sent: Void? = try await perform(when: {
            let statistics = client.statistics
            return statistics.connectionsEstablished >= 2 && statistics.inFlight > 0
                && harness.simulator.statistics().connectionsOpened >= 2
        }) { harness.simulator.goAwayAllConnections() }
        #expect(sent != nil, "the burst never showed up in flight")
        #expect(await collector.waitFor(count: burst))
        #expect(collector.count == burst)
        #expect(client.statistics.connectionsOpened >= 4, "the client opened successors for both connections")

        // The successors carry on.
        let more = 300
        try await submitAll(
            client,
            (burst..<(burst + more)).map {
                PushJob(token: makeToken($0 % 100), payload: payload, priority: .normal, cookie: UInt64($0))
            })
        #expect(await collector.waitFor(count: burst + more))
        await harness.shutdown()
        #expect(harness.simulator.statistics().goAwaysSent >= 2)
        try expectDeliveredExactlyOnce(harness, collector, count: burst + more)
    }
}

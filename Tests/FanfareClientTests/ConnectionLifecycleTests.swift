// Connections that end for reasons other than a push's answer: the server restarts, the client rotates
// connections before stream ids run out, idle connections are kept alive with PINGs.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.ownThread) struct ConnectionLifecycleTests {
    @Test func serverRestartMidBurstLosesNoPush() async throws {
        var simulator = SimulatorConfiguration()
        // Answers spread over five seconds: whenever the test looks, some pushes are answered, most are not.
        simulator.latency = .uniform(minNanoseconds: 1_000_000, maxNanoseconds: 5_000_000_000)
        simulator.initialMaxConcurrentStreams = 1000
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.firstRequestAlone = false
        configuration.resendUnconfirmed = true  // pushes the first server took but never answered go again
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 600
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        // APNs goes away with streams open (GOAWAY Shutdown, then the sockets close) and comes back.
        let port = harness.port
        let quick = {
            var quick = simulator
            quick.latency = .none
            return quick
        }()
        let restart = try await perform(when: { collector.count > 0 && client.statistics.inFlight > 10 }) {
            harness.simulator.shutdown()
            return try harness.startSimulator(quick, port: port, log: "restarted.jsonl")
        }
        let restarted = try #require(restart, "no moment with pushes both answered and in flight")

        #expect(await collector.waitFor(count: count))
        let results = collector.byCookie()
        #expect(results.count == count)
        let undelivered = results.values.filter { !$0.isDelivered }
        #expect(undelivered.isEmpty, "\(undelivered.prefix(3).map(\.disposition))")
        #expect(results.values.contains { $0.resends > 0 }, "pushes cut off by the restart were sent again")
        #expect(
            results.values.contains { $0.possibleDuplicate }, "and marked: the first server may have processed them")
        #expect(results.values.filter { $0.possibleDuplicate }.allSatisfy { $0.resends > 0 })
        #expect(client.statistics.connectionsOpened > 2)
        await harness.shutdown()
        let first = harness.simulator.statistics().accepted
        let second = restarted.statistics().accepted
        #expect(second > 0)
        // A push the first server accepted but never answered is sent again (APNs may see it twice).
        #expect(first + second >= count)
    }

    @Test func connectionsRotateBeforeStreamIDsRunOut() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.rotateAfterStreams = 25
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 300
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count))
        let results = collector.byCookie()
        #expect(results.count == count)
        #expect(results.values.allSatisfy { $0.isDelivered && $0.resends == 0 })
        #expect(client.statistics.connectionsOpened >= count / 25, "\(client.statistics.connectionsOpened) connections")
        #expect(await eventually { client.statistics.connectionsClosed >= count / 25 - 2 }, "drained connections close")
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.accepted == count)
        #expect(stats.goAwaysSent <= 2, "rotation is the client's doing, not the server's")
    }

    @Test func idleConnectionIsKeptAliveWithPings() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.pingInterval = .milliseconds(20)
        // Generous: only an unanswered PING may close the connection, not a slow (loaded or sanitized) run.
        configuration.pingTimeout = .seconds(10)
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        #expect(try await client.send(PushJob(token: makeToken(1), payload: payload)).isDelivered)
        try await Task.sleep(for: .milliseconds(300))  // idle: several PINGs go out and are answered
        #expect(try await client.send(PushJob(token: makeToken(2), payload: payload)).isDelivered)
        #expect(client.statistics.connectionsOpened == 1, "the answered PINGs kept the connection")
        #expect(client.statistics.connectionsClosed == 0)
    }
}

@Suite(.ownThread) struct SimulatorShutdownTests {
    /// The simulator's GOAWAY(Shutdown) reaches the client before the socket closes, so a push it cut off
    /// says why. The push went out and got no answer: unconfirmed (APNs may have processed it), not resent.
    @Test func simulatorShutdownSendsGoAwayWithItsReason() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 10_000_000_000)  // never answered before the shutdown
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.maxResends = 0
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1))
        // Shut down the moment the simulator has the request (on a thread of its own): a test task's
        // `eventually` can resume seconds late under the parallel suite, and after 10 s the 200 would arrive.
        let stopped: Void? = try await perform(when: { harness.simulator.streamConcurrency().maxOpenStreams == 1 }) {
            harness.simulator.shutdown()
        }
        #expect(stopped != nil, "the simulator has the request")
        #expect(await collector.waitFor(count: 1))
        let result = try #require(collector.all.first)
        guard case .failed(.unconfirmed(let cause)) = result.disposition else {
            Issue.record("expected unconfirmed, got \(result.disposition)")
            return
        }
        #expect(cause.contains("GOAWAY") && cause.contains("Shutdown"), "cause: \(cause)")
        #expect(result.resends == 0)
    }

    /// A stopped simulator closes its listener: clients are refused at once rather than left in a TLS
    /// handshake nobody will answer.
    @Test func stoppedSimulatorRefusesNewConnections() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        await harness.simulator.shutdown()
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectTimeout = .seconds(30)
        configuration.requestTimeout = .milliseconds(500)
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1))
        #expect(await collector.waitFor(count: 1))
        #expect(collector.all.first?.disposition == .failed(.deadlineExceeded))
        // The push's 500 ms deadline can pass before the worker's first connect attempt has failed when the
        // parallel suite starves its thread (seen on a cold CI run): wait for the attempt, not a fixed time.
        #expect(await eventually { client.lastConnectionError != nil })
        let error = try #require(client.lastConnectionError)
        #expect(error.lowercased().contains("refused"), "\(error)")
    }
}

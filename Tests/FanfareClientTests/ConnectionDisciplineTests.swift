// Connection discipline (APNs blocks providers that churn connections): back-off for connections that end
// before they prove usable, the one-stream gate, lookups and address fall-back, certificate rejections.
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite(.ownThread) struct ConnectionDisciplineTests {
    private static let backoff = Duration.milliseconds(100)

    /// With a minimum (and maximum) back-off B, one connection slot opens at most one connection per B
    /// however fast the server ends them: over a window W, at most W/B + 2 attempts. The window ends once the
    /// client has shown it keeps trying (`minimumConnections` opened, however long the machine takes to get
    /// there), then a shutdown ends the pushes still waiting: no request timeout decides when it ends.
    private func expectBoundedChurn(
        _ simulator: SimulatorConfiguration, minimumConnections: Int, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.reconnectBackoffMinimum = Self.backoff
        configuration.reconnectBackoffMaximum = Self.backoff
        configuration.maxResends = 1000
        configuration.requestTimeout = TestTime.scaled(Liveness.condition)  // a hang guard only
        let start = ContinuousClock.now
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 200
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(
            await eventually { client.statistics.connectionsOpened >= minimumConnections },
            "the client stopped opening connections", sourceLocation: sourceLocation)
        let opened = client.statistics.connectionsOpened
        let window = ContinuousClock.now - start
        let backoffs = client.statistics.reconnectBackoffs
        await client.shutdown()
        #expect(await collector.waitFor(count: count), sourceLocation: sourceLocation)
        let bound = Int(window / Self.backoff) + 2
        #expect(
            opened <= bound, "\(opened) connections in \(window) with a \(Self.backoff) back-off",
            sourceLocation: sourceLocation)
        #expect(backoffs >= minimumConnections - 1, sourceLocation: sourceLocation)
        #expect(collector.byCookie().count == count, sourceLocation: sourceLocation)
    }

    @Test func expiredProviderTokenOnEveryConnectionDoesNotChurn() async throws {
        // A clock skewed past APNs' hour: every connection's first push is 403 ExpiredProviderToken.
        var simulator = SimulatorConfiguration()
        simulator.faults = [FaultRule(reason: .expiredProviderToken, probability: 1)]
        try await expectBoundedChurn(simulator, minimumConnections: 3)
    }

    @Test func goAwayAfterEveryAnswerDoesNotChurn() async throws {
        // Each connection answers one push and then sends GOAWAY: usable, but short-lived.
        var simulator = SimulatorConfiguration()
        simulator.goAwayAfterStreams = 1
        try await expectBoundedChurn(simulator, minimumConnections: 3)
    }

    @Test func healthyConnectionsAreReplacedAtOnce() async throws {
        // GOAWAY after 50 answers with a back-off far longer than the test: successors of connections that
        // proved usable and lived past the minimum back-off open without waiting.
        var simulator = SimulatorConfiguration()
        simulator.goAwayAfterStreams = 50
        simulator.latency = .fixed(nanoseconds: 2_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.reconnectBackoffMinimum = .milliseconds(50)
        configuration.reconnectBackoffMaximum = .seconds(60)
        configuration.maxResends = 20
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 300
        // One push at a time, so each connection lives through 50 answers of 2 ms (≥ 100 ms, past 50 ms).
        for index in 0..<count {
            #expect(try await client.send(PushJob(token: makeToken(index), payload: payload)).isDelivered)
        }
        #expect(client.statistics.connectionsOpened >= count / 50)
        #expect(client.statistics.reconnectBackoffs == 0, "every successor opened at once")
    }

    @Test func staleTokensLiftTheGateButForbiddenOnesDoNot() async throws {
        var simulator = SimulatorConfiguration()
        simulator.knownTokens = []  // every token is 410 Unregistered
        simulator.initialMaxConcurrentStreams = 100
        simulator.latency = .fixed(nanoseconds: 30_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(), collector: collector)
        let payload = try updatePayload()
        try await submitAll(
            client, (0..<60).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: 60))
        #expect(collector.all.allSatisfy { $0.disposition.status == 410 })
        let concurrency = harness.simulator.streamConcurrency()
        #expect(concurrency.maxOpenStreams > 1, "a 410 proves the JWT: the connection fans out (\(concurrency))")

        // A JWT the simulator does not trust: every answer is 403, and the connection stays at one stream.
        let forbidden = try TestHarness(simulator)
        defer { forbidden.shutdown() }
        let rejected = ResultCollector()
        let untrusted = try ProviderTokenSource(
            signer: forbidden.signer(privateKeyFile: forbidden.keys.unknownPrivateKeyFile))
        let second = try forbidden.startClient(
            try forbidden.clientConfiguration(tokens: untrusted), collector: rejected)
        try await submitAll(
            second, (0..<20).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await rejected.waitFor(count: 20))
        #expect(rejected.all.allSatisfy { $0.disposition.status == 403 })
        #expect(forbidden.simulator.streamConcurrency().maxOpenStreams == 1)
    }

    @Test func hostNameLookupAndAddressFallBack() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        // "localhost" is looked up on the resolver thread and connected to.
        var byName = try harness.clientConfiguration()
        byName.host = "localhost"
        let named = try harness.startClient(byName, collector: ResultCollector())
        #expect(try await named.send(PushJob(token: makeToken(1), payload: try updatePayload())).isDelivered)

        // The first address refuses (nothing listens there): the next one is tried at once, no back-off.
        let closed = try closedPort()
        var fallBack = try harness.clientConfiguration()
        fallBack.connectAddresses = [.loopbackIPv4(port: closed), .loopbackIPv4(port: harness.port)]
        fallBack.reconnectBackoffMinimum = .seconds(60)
        fallBack.reconnectBackoffMaximum = .seconds(60)
        let client = try harness.startClient(fallBack, collector: ResultCollector())
        #expect(try await client.send(PushJob(token: makeToken(2), payload: try updatePayload())).isDelivered)
        #expect(client.statistics.connectionsOpened == 2)

        // Only IPv6 asked for, and only IPv4 given: refused when the client is made.
        var noFamily = try harness.clientConfiguration()
        noFamily.connectAddresses = [.loopbackIPv4(port: harness.port)]
        noFamily.addressFamilies = .ipv6Only
        #expect(throws: ClientConfigurationError.self) { try APNsClient(configuration: noFamily) }
    }

    @Test func certificateRejectionIsReportedAndBackedOff() async throws {
        let harness = try TestHarness()
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.tls = try TLSContext.client()  // the system's trust store: the simulator's CA is not in it
        configuration.reconnectBackoffMinimum = .milliseconds(20)
        configuration.reconnectBackoffMaximum = .milliseconds(20)
        configuration.requestTimeout = .seconds(600)
        let collector = ResultCollector()
        let client = try harness.startClient(configuration, collector: collector)
        try client.submit(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 1))
        #expect(await eventually { client.certificateRejection != nil })
        let reason = try #require(client.certificateRejection)
        #expect(reason.contains("certificate verify failed"), "\(reason)")
        // It keeps backing off and trying (a long-running engine recovers once the trust store is fixed).
        #expect(await eventually { client.statistics.certificateRejections >= 3 })
        #expect(collector.count == 0, "the push waits for its deadline, not failed by the rejection")
    }
}

/// A loopback port with no listener (bound, then closed).
func closedPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}

@Suite(.ownThread) struct ResendRuleTests {
    /// A simulator holding `count` pushes unanswered, killed once it has them all.
    private func killWithStreamsInFlight(
        resendUnconfirmed: Bool
    ) async throws -> (TestHarness, ResultCollector, APNsClient, APNsSimulator?) {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 20_000_000_000)  // never answered before the kill
        simulator.initialMaxConcurrentStreams = 1000
        let harness = try TestHarness(simulator)
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.firstRequestAlone = false
        configuration.resendUnconfirmed = resendUnconfirmed
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        try await submitAll(
            client, (0..<20).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        let port = harness.port
        let restarted: APNsSimulator?? = try await perform(when: {
            harness.simulator.streamConcurrency().maxOpenStreams == 20
        }) {
            harness.simulator.shutdown()  // GOAWAY(last = 39, Shutdown) and the sockets close: 20 sent, none answered
            return resendUnconfirmed ? try harness.startSimulator(port: port, log: "restarted.jsonl") : nil
        }
        let started = try #require(restarted, "the simulator had all 20 streams")
        return (harness, collector, client, started)
    }

    @Test func pushesCutOffMidStreamAreUnconfirmedNotResent() async throws {
        let (harness, collector, client, _) = try await killWithStreamsInFlight(resendUnconfirmed: false)
        defer { harness.shutdown() }
        #expect(await collector.waitFor(count: 20))
        let results = collector.byCookie()
        #expect(results.count == 20)
        for result in results.values {
            guard case .failed(.unconfirmed(let cause)) = result.disposition else {
                Issue.record("expected unconfirmed, got \(result.disposition)")
                continue
            }
            #expect(cause.contains("GOAWAY") && cause.contains("Shutdown"), "\(cause)")
            #expect(result.resends == 0 && !result.possibleDuplicate)
        }
        #expect(client.statistics.unconfirmed == 20)
    }

    @Test func pushesCutOffMidStreamAreResentAsPossibleDuplicatesWhenAsked() async throws {
        let (harness, collector, _, restarted) = try await killWithStreamsInFlight(resendUnconfirmed: true)
        defer { harness.shutdown() }
        #expect(await collector.waitFor(count: 20))
        let results = collector.byCookie()
        #expect(results.count == 20)
        #expect(
            results.values.allSatisfy { $0.isDelivered && $0.possibleDuplicate && $0.resends == 1 },
            "\(results.values.prefix(2).map(\.disposition))")
        await harness.shutdown()
        #expect(restarted?.statistics().accepted == 20)
    }

    @Test func goAwayMidBurstResendsOnlyTheUnprocessed() async throws {
        // The server answers what it took before its GOAWAY; streams above last-stream-id go elsewhere.
        var simulator = SimulatorConfiguration()
        simulator.goAwayAfterStreams = 7
        simulator.initialMaxConcurrentStreams = 1000
        simulator.latency = .uniform(minNanoseconds: 0, maxNanoseconds: 5_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.firstRequestAlone = false
        configuration.maxResends = 1000  // every connection takes the whole burst and refuses all but 7
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 140
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count))
        let results = collector.byCookie()
        #expect(results.count == count)
        #expect(
            results.values.allSatisfy { $0.isDelivered && !$0.possibleDuplicate },
            "\(results.values.filter { !$0.isDelivered }.prefix(3).map(\.disposition))")
        #expect(results.values.contains { $0.resends > 0 }, "some streams were above a GOAWAY's last-stream-id")
        await harness.shutdown()
        let logged = try harness.acceptedLog().compactMap { $0.string("apns-id") }
        #expect(logged.count == count && Set(logged).count == count, "each push accepted exactly once")
    }
}

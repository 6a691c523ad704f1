// A provider token whose `iat` is more than an hour old gets 403 ExpiredProviderToken; the client mints a
// fresh one, opens a new connection and resends, so the push is still delivered (apns-spec.md §6.1).
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// Wall-clock seconds plus an offset the test moves.
final class OffsetClock: Sendable {
    let offset: Atomic<Int64>

    init(offset: Int64) {
        self.offset = Atomic(offset)
    }

    func now() -> Int64 { ProviderTokenSource.wallClockSeconds() + offset.load(ordering: .relaxed) }
}

@Suite(.ownThread) struct ProviderTokenExpiryTests {
    /// A host clock two hours behind: the source mints with it and, reading the same clock, believes its token
    /// fresh. The simulator (on real time) sees the token two hours old; the moment it verifies that token the
    /// host clock gets corrected (as NTP would), so the client's re-mint after the 403 is on real time.
    private func staleTokenHarness(
        _ configuration: SimulatorConfiguration = SimulatorConfiguration()
    ) throws
        -> (TestHarness, ProviderTokenSource)
    {
        let clock = OffsetClock(offset: -2 * 3600)
        let harness = try TestHarness(configuration) { token in
            if token.issuedAt < ProviderTokenSource.wallClockSeconds() - 3600 {
                clock.offset.store(0, ordering: .relaxed)
            }
        }
        let source = ProviderTokenSource(signer: try harness.signer(), clock: { clock.now() })
        #expect(
            source.current().issuedAt < ProviderTokenSource.wallClockSeconds() - 3600,
            "the first token is over an hour old")
        return (harness, source)
    }

    @Test func expiredTokenIsReplacedAndThePushDelivered() async throws {
        let started = ProviderTokenSource.wallClockSeconds()
        let (harness, source) = try staleTokenHarness()
        defer { harness.shutdown() }
        let generation = source.generation
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(tokens: source), collector: collector)
        let result = try await client.send(PushJob(token: makeToken(1), payload: try updatePayload(), cookie: 5))
        #expect(result.disposition == .delivered, "\(result.disposition)")
        #expect(result.resends >= 1, "the rejected push was sent again")
        #expect(source.generation > generation, "a fresh token was minted")
        #expect(source.current().issuedAt >= started, "the new token was minted on the corrected clock")
        #expect(client.statistics.connectionsOpened >= 2, "the resend went out on a new connection")
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.count(of: .expiredProviderToken) == 1)
        #expect(stats.accepted == 1)
    }

    /// With a wedged connection every request on it gets ExpiredProviderToken; several in flight at once all
    /// come back, are resent on the successor and delivered.
    @Test func wedgedConnectionAfterExpiredTokenStillDeliversEverything() async throws {
        var simulator = SimulatorConfiguration()
        simulator.wedgeAfterExpiredToken = true
        simulator.initialMaxConcurrentStreams = 50  // let several requests share the doomed connection
        simulator.latency = .fixed(nanoseconds: 2_000_000)
        let (harness, source) = try staleTokenHarness(simulator)
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration(tokens: source)
        configuration.firstRequestAlone = false
        let client = try harness.startClient(configuration, collector: collector)
        let payload = try updatePayload()
        let count = 40
        try await submitAll(
            client, (0..<count).map { PushJob(token: makeToken($0), payload: payload, cookie: UInt64($0)) })
        #expect(await collector.waitFor(count: count))
        let results = collector.byCookie()
        #expect(results.count == count)
        #expect(
            results.values.allSatisfy { $0.isDelivered },
            "\(results.values.filter { !$0.isDelivered }.prefix(3).map(\.disposition))")
        #expect(results.values.contains { $0.resends >= 1 })
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.count(of: .expiredProviderToken) >= 1)
        #expect(stats.count(of: .tooManyProviderTokenUpdates) == 0, "one re-mint for many rejections")
        #expect(stats.accepted == count)
    }

    /// The shared token is re-minted once it is `refreshInterval` old, before APNs would call it expired: the
    /// client asks the source on its own, not only after a 403.
    @Test func tokenIsReMintedOnScheduleWithoutAnExpiredAnswer() async throws {
        var simulator = SimulatorConfiguration()
        simulator.minTokenRefreshInterval = 0  // the simulator's clock cannot see the client's 21 minutes pass
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let clock = OffsetClock(offset: -21 * 60)
        let source = ProviderTokenSource(signer: try harness.signer(), refreshInterval: 20 * 60, clock: { clock.now() })
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(tokens: source), collector: collector)
        let payload = try updatePayload()
        let first = try await client.send(PushJob(token: makeToken(1), payload: payload))
        #expect(first.isDelivered)
        #expect(source.generation == 1)

        clock.offset.store(0, ordering: .relaxed)  // 21 minutes later, as the client sees it
        #expect(await eventually { source.generation > 1 }, "the client re-minted the due token by itself")
        let second = try await client.send(PushJob(token: makeToken(2), payload: payload))
        #expect(second.isDelivered)
        #expect(second.resends == 0)
        #expect(client.statistics.connectionsOpened == 1, "a scheduled re-mint needs no new connection")
        await harness.shutdown()
        #expect(harness.simulator.statistics().count(of: .expiredProviderToken) == 0)
    }
}

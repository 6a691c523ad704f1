// A provider key rotated while pushes flow (issue 25): new connections sign with the new key and the old ones
// drain, so no push fails and no connection changes its key (the simulator binds each connection to the key of
// its first request and answers another key 403 UnrelatedKeyIdInToken). A new key APNs refuses is set aside
// for the previous one.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.ownThread) struct ProviderKeyRotationTests {
    /// The simulator knows the fixture key and `ROTATED001` (the same key material under another id).
    static func harness() throws -> TestHarness {
        var configuration = SimulatorConfiguration()
        configuration.keyID = Fixture.keyID
        configuration.providerKeys = ["ROTATED001": ProviderKeyScope()]
        configuration.latency = .fixed(nanoseconds: 2_000_000)
        return try TestHarness(configuration)
    }

    /// Sends `count` pushes from a task of its own; `rotate` runs once `rotateAfter` results are in.
    static func send(
        _ count: Int, on client: APNsClient, collector: ResultCollector, rotateAfter: Int, rotate: () -> Void
    ) async throws {
        let payload = try updatePayload()
        for index in 0..<count {
            try client.submit(PushJob(token: makeToken(index), payload: payload, cookie: UInt64(index)))
            if index == rotateAfter {
                #expect(await collector.waitFor(count: rotateAfter / 2, timeout: TestTime.scaled(Liveness.condition)))
                rotate()
            }
        }
        #expect(await collector.waitFor(count: count, timeout: TestTime.scaled(Liveness.condition)))
    }

    @Test func aRotatedKeyGoesOnNewConnectionsAndNoPushFails() async throws {
        let harness = try Self.harness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        let client = try harness.startClient(configuration, collector: collector)
        let rotated = ProviderTokenSource(signer: try harness.signer(keyID: "ROTATED001"))
        try await Self.send(2_000, on: client, collector: collector, rotateAfter: 1_000) {
            client.rotateProviderKey(to: rotated)
        }
        let results = collector.all
        #expect(
            results.allSatisfy { $0.disposition == .delivered },
            "\(results.filter { $0.disposition != .delivered }.prefix(3))")
        #expect(client.providerKeys.current === rotated)
        #expect(client.providerKeys.lastRefusal == nil)
        #expect(client.statistics.connectionsOpened >= 4, "the new key went on new connections")
        await harness.shutdown()
        let stats = harness.simulator.statistics()
        #expect(stats.count(of: .unrelatedKeyIdInToken) == 0, "no connection changed its key")
        #expect(stats.count(of: .tooManyProviderTokenUpdates) == 0)
        #expect(stats.accepted == 2_000)
    }

    @Test func aNewKeyAPNsRefusesIsSetAsideForThePreviousOne() async throws {
        let harness = try Self.harness()
        defer { harness.shutdown() }
        let collector = ResultCollector()
        let client = try harness.startClient(try harness.clientConfiguration(), collector: collector)
        let original = try #require(client.providerKeys.current)
        let unknown = ProviderTokenSource(signer: try harness.signer(keyID: "UNKNOWN001"))
        try await Self.send(600, on: client, collector: collector, rotateAfter: 300) {
            client.rotateProviderKey(to: unknown)
        }
        let results = collector.all
        #expect(results.allSatisfy { $0.disposition == .delivered }, "the refused push was sent again")
        #expect(client.providerKeys.current === original, "the previous key signs again")
        #expect(client.providerKeys.lastRefusal?.keyID == "UNKNOWN001")
        #expect(client.providerKeys.lastRefusal?.reason == "InvalidProviderToken")
        await harness.shutdown()
        #expect(harness.simulator.statistics().count(of: .invalidProviderToken) >= 1, "APNs did refuse it")
    }
}

/// Channel management follows the push client's key rotation: calls after a rotation go on a new connection signed
/// with the new key (the simulator binds a management connection to its first key as APNs does).
@Suite(.ownThread) struct ChannelManagementKeyRotationTests {
    @Test func callsAfterARotationGoOnANewConnectionWithTheNewKey() async throws {
        var configuration = SimulatorConfiguration()
        configuration.keyID = Fixture.keyID
        configuration.providerKeys = ["ROTATED001": ProviderKeyScope()]
        var seen: Set<String> = []
        let seenKeys = Mutex(seen)
        let harness = try TestHarness(configuration, management: true) { token in
            seenKeys.withLock { _ = $0.insert(token.keyID) }
        }
        defer { harness.shutdown() }
        let keys = ProviderKeyRotation(ProviderTokenSource(signer: try harness.signer()))
        let manager = try harness.channelManager { $0.providerKeys = keys }
        defer { manager.shutdown() }
        let first = try await manager.create(storagePolicy: .noMessageStored)
        keys.rotate(to: ProviderTokenSource(signer: try harness.signer(keyID: "ROTATED001")))
        let second = try await manager.create(storagePolicy: .noMessageStored)
        #expect(try await manager.list() == [first, second])
        await harness.shutdown()
        seen = seenKeys.withLock { $0 }
        #expect(seen == [Fixture.keyID, "ROTATED001"], "\(seen)")
        let stats = harness.simulator.managementStatistics()
        #expect(stats.count(of: .unrelatedKeyIdInToken) == 0 && stats.accepted == 3)
    }
}

// Issue 14 (engine side): several engines ("nodes") on one PostgreSQL, each sending only the shards it holds.
// A wave published through one node is sent by all of them, its report is the sum over shards from any node,
// and a node abandoned mid-wave (what kill -9 leaves) hands its shards to another that finishes them from their
// checkpoints. Real PostgreSQL (initdb into a temporary directory), real simulator over TLS loopback.
import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfarePostgres
import FanfareStorage
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.serialized, .ownThread) struct LeasedShardTests {
    static let shards = 4
    static let window = 500
    static let streams = 50

    static func simulator() -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration()
        configuration.latency = .fixed(nanoseconds: 100_000_000)
        return configuration
    }

    static func node(
        _ harness: TestHarness, _ store: PostgresTokenStore, unfinishedWaves: Int = 4096
    ) throws -> FanoutEngine {
        var client = try harness.clientConfiguration()
        client.workerCount = shards
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 200, window: window)
        configuration.leasedShards = true
        configuration.maximumUnfinishedWaves = unfinishedWaves
        return try FanoutEngine(configuration: configuration, store: store, waveStore: store)
    }

    static let forever = UInt64.max / 2

    @Test func aWavePublishedOnOneNodeIsSentByEveryNodeForItsShards() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let count = 2_000
        let storeA = try PostgresTokenStore(url: postgres.url)
        let storeB = try PostgresTokenStore(url: postgres.url)
        try storeA.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let a = try Self.node(harness, storeA)
        let b = try Self.node(harness, storeB)
        defer {
            a.shutdown()
            b.shutdown()
        }
        try a.takeShard(0, sendUntil: Self.forever)
        try a.takeShard(1, sendUntil: Self.forever)
        try b.takeShard(2, sendUntil: Self.forever)
        try b.takeShard(3, sendUntil: Self.forever)
        #expect(a.heldShards == [0, 1] && b.heldShards == [2, 3])

        let id = try b.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        try a.catchUpWaves()
        #expect(await eventually(timeout: .seconds(60)) { (try? a.report(id: id))??.isComplete == true })
        let fromA = try #require(try a.report(id: id))
        let fromB = try #require(try b.report(id: id))
        #expect(fromA == fromB, "any node answers the same report")
        #expect(fromA.targeted == count && fromA.delivered == count && fromA.accounted == count, "\(fromA)")
        let log = try harness.acceptedIDsByToken()
        #expect(
            log.count == count && log.values.allSatisfy { $0.count == 1 }, "every token once, from the node holding it")

        // Latest state wins across nodes: an older update published on the other node is refused.
        #expect(
            throws: PublishError.olderThanCurrent(channel: "match", timestamp: 1_800_000_000, current: 1_800_000_001)
        ) {
            _ = try a.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_000, home: 0, away: 0))
        }
    }

    @Test func aNodeAbandonedMidWaveHandsItsShardsToAnother() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let count = 4_000
        let storeA = try PostgresTokenStore(url: postgres.url)
        let storeB = try PostgresTokenStore(url: postgres.url)
        try storeA.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let a = try Self.node(harness, storeA)
        let b = try Self.node(harness, storeB)
        defer { b.shutdown() }
        try a.takeShard(0, sendUntil: Self.forever)
        try a.takeShard(1, sendUntil: Self.forever)
        try b.takeShard(2, sendUntil: Self.forever)
        try b.takeShard(3, sendUntil: Self.forever)
        let id = try a.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        try b.catchUpWaves()
        let abandoning = a
        let abandoned: Void? = try await perform(
            when: { ((try? abandoning.report(id: id))??.delivered ?? 0) >= count / 4 }, timeout: .seconds(60)
        ) {
            abandoning.abandonForTesting()
        }
        try #require(abandoned != nil, "a quarter delivered within 60 s")
        // The lease of A's shards moves to B (here by hand; the coordinator does it when A's lease expires).
        try b.takeShard(0, sendUntil: Self.forever)
        try b.takeShard(1, sendUntil: Self.forever)
        #expect(await eventually(timeout: .seconds(60)) { (try? b.report(id: id))??.isComplete == true })
        let report = try #require(try b.report(id: id))
        // Within A's two shards' windows.
        let duplicates = try TakeOverChecks.expectOutcome(
            report, harness, count: count, duplicateBound: 2 * (Self.window + Self.streams))
        print(
            "leased shards, node abandoned: \(count) tokens, \(duplicates) duplicates, resentAfterRestart \(report.resentAfterRestart)"
        )
    }

    /// Issue 24: every node starts every wave on its shards, so the unfinished-wave limit is the cluster's. A
    /// publish on any node past it is refused (back-pressure), and admitted again once waves complete. Before,
    /// `publishShared` never checked it: enough waves reached the shards' wave-slot precondition on every node.
    @Test func theUnfinishedWaveLimitHoldsAcrossNodes() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(Self.simulator())
        defer { harness.shutdown() }
        let storeA = try PostgresTokenStore(url: postgres.url)
        let storeB = try PostgresTokenStore(url: postgres.url)
        try storeA.register(FanoutFixture.registrations(0..<200, channel: "match"))
        let a = try Self.node(harness, storeA, unfinishedWaves: 2)
        let b = try Self.node(harness, storeB, unfinishedWaves: 2)
        defer {
            a.shutdown()
            b.shutdown()
        }
        // No node holds a shard yet: nothing is sent, the waves stay unfinished.
        let first = try a.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        let second = try b.publishShared(scoreUpdate(channel: "final", timestamp: 1_800_000_001, home: 0, away: 0))
        #expect(throws: PublishError.tooManyUnfinishedWaves(limit: 2), "B counts A's wave too") {
            _ = try b.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_002, home: 2, away: 0))
        }
        #expect(throws: PublishError.tooManyUnfinishedWaves(limit: 2), "and A counts B's") {
            _ = try a.publishShared(scoreUpdate(channel: "other", timestamp: 1_800_000_002, home: 2, away: 0))
        }
        // Once a node holds the shards both waves complete, and publishing goes on.
        try a.takeShards(Array(0..<Self.shards), sendUntil: Self.forever)
        #expect(
            await eventually(timeout: .seconds(60)) {
                (try? a.report(id: first))??.isComplete == true && (try? a.report(id: second))??.isComplete == true
            })
        let third = try b.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_002, home: 2, away: 0))
        #expect(third > second)
        try a.catchUpWaves()  // what A's coordinator does on the store's notice
        #expect(await eventually(timeout: .seconds(60)) { (try? a.report(id: third))??.isComplete == true })
    }
}

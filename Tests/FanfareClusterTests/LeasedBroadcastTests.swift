// Issue 24: broadcast channels with several nodes. A link made on one node is the cluster's (kept in PostgreSQL);
// a wave published on any node carries the broadcast part, sent once for the cluster by the node holding the
// channel's broadcast shard, with the audience counted in the shared registry; when that node dies with the
// broadcast out, the node taking the shard sends it again with its first apns-id and reports it as resent.
// Real PostgreSQL, real simulator (push and management listeners) over TLS loopback.
import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfarePostgres
import FanfareSimulator
import FanfareStorage
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.serialized, .ownThread) struct LeasedBroadcastTests {
    static func node(_ harness: TestHarness, _ store: PostgresTokenStore) throws -> FanoutEngine {
        var client = try harness.clientConfiguration()
        client.workerCount = LeasedShardTests.shards
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = 100
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 200, window: 500)
        configuration.leasedShards = true
        var management = ChannelManagementConfiguration(
            host: "127.0.0.1", port: harness.managementPort, tls: harness.keys.clientTLS,
            providerTokens: try ProviderTokenSource(signer: harness.signer()), bundleID: Fixture.bundleID)
        management.requestTimeout = TestTime.scaled(Liveness.condition)
        configuration.channelManagement = management
        return try FanoutEngine(configuration: configuration, store: store, waveStore: store)
    }

    /// Node A holds the channel's broadcast shard and the next one; B the other two.
    static func split(_ channel: String) -> (a: [Int], b: [Int]) {
        let shards = LeasedShardTests.shards
        let broadcastShard = FanoutEngine.broadcastShard(channel, shards: shards)
        let a = [broadcastShard, (broadcastShard + 1) % shards]
        return (a, (0..<shards).filter { !a.contains($0) })
    }

    /// 200 activities: 100 with update tokens, 100 subscribed to the channel's broadcasts instead.
    static func registerAudience(_ store: PostgresTokenStore) throws {
        try store.register(FanoutFixture.registrations(100..<200, channel: "match"))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let subscriptions = (0..<100).map {
            BroadcastSubscription(
                activityID: "activity-\($0)", deviceID: "device-\($0)", attributesType: "MatchAttributes",
                bundleID: Fixture.bundleID, environment: .production, channels: ["match"], createdAt: now)
        }
        try store.register([], subscriptions: subscriptions)
    }

    static func broadcasts(_ log: [AcceptedRecord]) -> [AcceptedRecord] {
        log.filter { $0.string("channel-id") != nil }
    }
    static func tokenPushes(_ log: [AcceptedRecord]) -> [AcceptedRecord] { log.filter { $0.string("token") != nil } }

    /// Two engines on one database with the audience registered through A's store, A holding the channel's
    /// broadcast shard and the next one, B the other two.
    struct TwoNodes {
        let postgres: PostgresServer
        let harness: TestHarness
        let storeB: PostgresTokenStore
        let a: FanoutEngine
        let b: FanoutEngine
        let shardsA: [Int]

        init(latency nanoseconds: Int64) throws {
            postgres = try PostgresServer()
            var simulator = SimulatorConfiguration()
            simulator.latency = .fixed(nanoseconds: nanoseconds)
            harness = try TestHarness(simulator, management: true)
            let storeA = try PostgresTokenStore(url: postgres.url)
            storeB = try PostgresTokenStore(url: postgres.url)
            try LeasedBroadcastTests.registerAudience(storeA)
            a = try LeasedBroadcastTests.node(harness, storeA)
            b = try LeasedBroadcastTests.node(harness, storeB)
            let shardsB: [Int]
            (shardsA, shardsB) = LeasedBroadcastTests.split("match")
            try a.takeShards(shardsA, sendUntil: LeasedShardTests.forever)
            try b.takeShards(shardsB, sendUntil: LeasedShardTests.forever)
        }

        func stop() {
            harness.shutdown()
            postgres.stop()
        }
    }

    @Test func aWavePublishedOnAnyNodeBroadcastsOnceForTheCluster() async throws {
        let nodes = try TwoNodes(latency: 50_000_000)
        let (a, b, harness) = (nodes.a, nodes.b, nodes.harness)
        defer {
            a.shutdown()
            b.shutdown()
            nodes.stop()
        }
        // Linked through A; B knows it from the database, as it knows the subscriptions A registered.
        let link = try await a.createBroadcastChannel(for: "match", storagePolicy: .noMessageStored)
        #expect(try b.broadcastLink(of: "match") == link)
        #expect(try b.broadcastSubscribers(of: "match") == 100)

        let id = try b.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        try a.catchUpWaves()
        #expect(await eventually(timeout: .seconds(60)) { (try? b.report(id: id))??.isComplete == true })
        let report = try #require(try b.report(id: id))
        #expect(report.targeted == 100 && report.delivered == 100 && report.accounted == 100, "\(report)")
        let broadcast = try #require(report.broadcast, "the report has the broadcast part: \(report)")
        #expect(
            broadcast.outcome == .delivered && broadcast.subscribers == 100 && broadcast.requests == 1
                && broadcast.channelID == link.channelID, "\(broadcast)")
        #expect(try a.report(id: id) == report, "any node answers the same report")
        await harness.shutdown()
        let log = try harness.acceptedLog()
        #expect(Self.broadcasts(log).count == 1, "one broadcast for the cluster")
        #expect(Self.tokenPushes(log).count == 100, "and a push per update token, none to subscribers")
    }

    @Test func aNodeLostWithTheBroadcastOutLeavesItToTheNodeTakingItsShard() async throws {
        // 8 s: A is abandoned after the broadcast went out and before APNs answers it (see BroadcastPlannerTests).
        let nodes = try TwoNodes(latency: 8_000_000_000)
        let (a, b, harness, storeB, shardsA) = (nodes.a, nodes.b, nodes.harness, nodes.storeB, nodes.shardsA)
        defer {
            b.shutdown()
            nodes.stop()
        }
        _ = try await b.createBroadcastChannel(for: "match", storagePolicy: .noMessageStored)
        let id = try a.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        try b.catchUpWaves()
        // A is abandoned (what kill -9 leaves) once its checkpoint records the broadcast as maybe sent.
        let abandoning = a
        let abandoned: Void? = try await perform(
            when: {
                let progress = try? storeB.waveProgress(id: id)
                return progress?.checkpoints.contains {
                    (try? ShardCheckpoint(decoding: $0.data))?.broadcast?.possiblySent == true
                } == true
            }, timeout: .seconds(30)
        ) {
            abandoning.abandonForTesting()
        }
        try #require(abandoned != nil)
        try b.takeShards(shardsA, sendUntil: LeasedShardTests.forever)
        #expect(await eventually(timeout: .seconds(90)) { (try? b.report(id: id))??.isComplete == true })
        let report = try #require(try b.report(id: id))
        #expect(report.targeted == 100 && report.delivered == 100 && report.accounted == 100, "\(report)")
        let broadcast = try #require(report.broadcast)
        #expect(broadcast.outcome == .delivered && broadcast.resentAfterRestart, "\(broadcast)")
        await b.shutdown()
        await harness.shutdown()
        let broadcasts = Self.broadcasts(try harness.acceptedLog())
        #expect(broadcasts.count >= 1 && broadcasts.count <= 2, "at most one duplicate broadcast")
        #expect(
            Set(broadcasts.compactMap { $0.string("apns-request-id") }).count == 1,
            "the resend carries the first request id")
    }
}

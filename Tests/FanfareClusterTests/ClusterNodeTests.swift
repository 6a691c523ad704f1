// Issue 14: nodes in one process, each a FanoutEngine with a ClusterNode on one real PostgreSQL (initdb into a
// temporary directory) and the real simulator over TLS loopback: leases shared at start, registrations reach
// the node holding their shard through the change feed, a wave published on one node is sent by all, a node
// that stops renewing (what kill -9 leaves) has its shards taken over mid-wave, and a node whose heartbeat stopped
// has its database sessions ended by a live node (issue 22).
import FanfareClient
@testable import FanfareCluster
import FanfareCore
@testable import FanfareFanout
import FanfarePostgres
import FanfareStorage
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.serialized, .ownThread) struct ClusterNodeTests {
    static let shards = 4
    static let window = 500
    static let streams = 50

    struct Node {
        let store: PostgresTokenStore
        let engine: FanoutEngine
        let cluster: ClusterNode
    }

    static func node(
        _ name: String, _ harness: TestHarness, _ postgres: PostgresServer, lease: Duration = .seconds(3),
        joinWindow: Duration = .seconds(4), streams: Int = ClusterNodeTests.streams
    ) throws -> Node {
        // The node's main store names its run, like every session of the node (a live node fences them all).
        let store = try PostgresTokenStore(url: postgres.url, incarnation: NodeIncarnation())
        var client = try harness.clientConfiguration()
        client.workerCount = shards
        client.connectionsPerWorker = 1
        client.maxConcurrentStreamsPerConnection = streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = nil
        configuration.retryDelays = [.milliseconds(10), .milliseconds(20), .milliseconds(40)]
        configuration.checkpoints = CheckpointConfiguration(interval: .milliseconds(20), pushes: 200, window: window)
        configuration.leasedShards = true
        let engine = try FanoutEngine(configuration: configuration, store: store, waveStore: store)
        var cluster = ClusterConfiguration(nodeID: name, shardCount: Self.shards)
        cluster.leaseDuration = lease
        cluster.safetyMargin = .milliseconds(500)
        cluster.joinWindow = joinWindow
        cluster.pollInterval = .milliseconds(200)
        let node = try ClusterNode(url: postgres.url, engine: engine, configuration: cluster, checkpointStore: store)
        return Node(store: store, engine: engine, cluster: node)
    }

    @Test func twoNodesShareTheShardsFollowTheFeedsAndTakeOverAFailedNode() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 100_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        let a = try Self.node("a", harness, postgres)
        let b = try Self.node("b", harness, postgres)
        a.cluster.start()
        b.cluster.start()
        defer {
            b.engine.shutdown()
            b.cluster.stop()
        }
        // Each takes half when both heartbeat within the join window; a node that came too late on a loaded
        // machine gets its half by a hand-over (RebalancingTests), and the takeover below works either way.
        #expect(
            await eventually(timeout: .seconds(60)) {
                a.cluster.status.heldShards.count + b.cluster.status.heldShards.count == Self.shards
            }, "every shard held: \(a.cluster.status) \(b.cluster.status)")

        // Registered through A after both hold their shards: B's tokens reach it through the change feed.
        let count = 4_000
        try a.engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let bShards = Set(b.cluster.status.heldShards)
        let bTokens = (0..<count).filter {
            bShards.contains(APNsClient.workerIndex(for: longToken($0), workerCount: Self.shards))
        }.count
        #expect(
            await eventually {
                // The shards' published counts (shardFootprint reads the tables themselves: only once stopped).
                b.engine.heldShardTokens == bTokens
            }, "B has its \(bTokens) tokens from the feed")

        let id = try b.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        // A gets it through NOTIFY (or its poll); kill it once a quarter is delivered.
        let abandoning = a
        let abandoned: Void? = try await perform(
            when: { ((try? b.engine.report(id: id))??.delivered ?? 0) >= count / 4 }, timeout: .seconds(60)
        ) {
            abandoning.cluster.abandonForTesting()
            abandoning.engine.abandonForTesting()
        }
        try #require(abandoned != nil, "a quarter delivered within 60 s")
        let killed = ContinuousClock.now
        #expect(await eventually { b.cluster.status.heldShards.count == Self.shards }, "B takes A's shards")
        let takeover = ContinuousClock.now - killed
        #expect(await eventually(timeout: .seconds(60)) { (try? b.engine.report(id: id))??.isComplete == true })
        let report = try #require(try b.engine.report(id: id))
        let duplicates = try TakeOverChecks.expectOutcome(
            report, harness, count: count, duplicateBound: 2 * (Self.window + Self.streams))
        print("cluster in process: takeover after \(takeover), \(duplicates) duplicates, \(report)")
    }

    /// Issue 24: a take-over whose load fails (here: a wave row no reader accepts) is tried again until it works,
    /// and meanwhile its shards are not reported served. Before, the take list was emptied before the load: the
    /// shards stayed leased and renewed but were never served, `/readyz` called them held, and the wave ran forever.
    @Test func aTakeOverWhoseLoadFailsIsTriedAgainAndNotReportedServed() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let a = try Self.node("a", harness, postgres)
        defer {
            a.engine.shutdown()
            a.cluster.stop()
        }
        let count = 400
        try a.store.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let id = try a.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        // Start keys are whole 8-byte keys; one byte is a row the store refuses to read.
        _ = try postgres.psql("UPDATE waves SET start_keys = '\\x01'::bytea WHERE id = \(id)")
        a.cluster.start()
        #expect(
            await eventually(timeout: .seconds(60)) { a.cluster.status.failedTakes >= 2 },
            "the load failed and was tried again: \(a.cluster.status)")
        let failing = a.cluster.status
        #expect(failing.heldShards.isEmpty && failing.takingShards.count == Self.shards, "\(failing)")
        #expect((try? a.engine.report(id: id))??.isComplete != true)

        _ = try postgres.psql("UPDATE waves SET start_keys = '\\x'::bytea WHERE id = \(id)")
        #expect(
            await eventually(timeout: .seconds(60)) {
                a.cluster.status.heldShards.count == Self.shards && a.cluster.status.takingShards.isEmpty
            }, "served once the row reads again: \(a.cluster.status)")
        #expect(await eventually(timeout: .seconds(60)) { (try? a.engine.report(id: id))??.isComplete == true })
        let report = try #require(try a.engine.report(id: id))
        #expect(report.delivered == count && report.accounted == count, "\(report)")
    }

    /// Issue 24: a change-feed page with registrations this node cannot apply (their channels would pass the
    /// engine's channel limit) is applied as far as it fits, and the feed goes on. Before, the page's error
    /// stopped the feed for good: registrations and removals written after it never reached the node.
    @Test func aFeedPageThatDoesNotFitIsAppliedAsFarAsItFitsAndTheFeedGoesOn() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let a = try Self.node("a", harness, postgres)
        defer {
            a.engine.shutdown()
            a.cluster.stop()
        }
        a.cluster.start()
        #expect(await eventually(timeout: .seconds(60)) { a.cluster.status.heldShards.count == Self.shards })
        // Written by "another node" (the registry itself): the feed brings them here.
        try a.store.register(FanoutFixture.registrations(0..<3, channel: "match"))
        let limit = FanoutEngine.maximumChannels
        var flood = FanoutFixture.registrations(3..<3 + limit, channel: "")
        for index in flood.indices { flood[index].channels = ["league-\(index)"] }
        try a.store.register(flood)  // with "match", one channel more than the engine can track
        try a.store.register(FanoutFixture.registrations(3 + limit..<6 + limit, channel: "match"))
        #expect(
            await eventually(timeout: .seconds(120)) {
                a.engine.statistics.registrationsRefusedForChannels == 1 && a.engine.heldShardTokens == 5 + limit
            },
            "every registration but one applied: \(a.engine.heldShardTokens) tokens, \(a.engine.statistics)")
        let id = try a.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        #expect(await eventually(timeout: .seconds(60)) { (try? a.engine.report(id: id))??.isComplete == true })
        let report = try #require(try a.engine.report(id: id))
        #expect(report.targeted == 6 && report.delivered == 6, "the tokens registered after the page: \(report)")
        // A wave on a channel that does not fit here (another node published it): this node has none of its
        // tokens, so its parts finish empty and the wave completes (before, it stayed running for good).
        let unseen = try a.engine.publishShared(
            scoreUpdate(channel: "unseen", timestamp: 1_800_000_001, home: 1, away: 0))
        #expect(await eventually(timeout: .seconds(60)) { (try? a.engine.report(id: unseen))??.isComplete == true })
        #expect(try a.engine.report(id: unseen)?.targeted == 0)
    }

    /// Sessions in the test database named after `incarnation`.
    static func sessions(_ postgres: PostgresServer, _ incarnation: NodeIncarnation) throws -> Int {
        Int(
            try postgres.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'fanfare-node \(incarnation.hex)'"
            )) ?? -1
    }

    /// Issue 22: a node stopped (its heartbeat with it) keeps its sessions and what they lock until a live node's
    /// lease round ends them, once its heartbeat is older than a lease. The live node's own sessions and a client
    /// that is no node keep theirs.
    @Test func aLiveNodeEndsTheSessionsOfANodeWhoseHeartbeatStopped() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let lease = Duration.seconds(2)
        // The stalled node: one heartbeat, then nothing; its session stays open.
        let stalledRun = NodeIncarnation()
        let stalled = try PostgresTokenStore(url: postgres.url, incarnation: stalledRun)
        defer { try? stalled.close() }
        _ = try stalled.heartbeat(node: "stalled", incarnation: stalledRun, window: lease)
        // `fanfare import`: no node.
        let plain = try PostgresTokenStore(url: postgres.url)
        defer { try? plain.close() }
        #expect(try Self.sessions(postgres, stalledRun) == 1)

        let live = try Self.node("live", harness, postgres, lease: lease)
        live.cluster.start()
        defer {
            live.engine.shutdown()
            live.cluster.stop()
        }
        let fenced = await eventually(timeout: .seconds(60)) {
            (try? Self.sessions(postgres, stalledRun)) == 0 && live.cluster.status.fencedSessions >= 1
        }
        #expect(fenced, "the stalled node's session is ended: \(live.cluster.status)")
        // Its own: the main store, the lease and feed stores, the listener (which connects on its own time).
        #expect(
            await eventually(timeout: .seconds(60)) { (try? Self.sessions(postgres, live.cluster.incarnation)) == 4 })
        #expect(try plain.count() == 0 && plain.connectionsOpened == 1, "a client that is no node keeps its session")
        // Resumed, the stalled node's next call opens a new session.
        #expect(try stalled.count() == 0 && stalled.connectionsOpened == 2)
    }
}

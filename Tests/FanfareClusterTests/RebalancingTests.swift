// Issue 24: rebalancing. A node that joins a running cluster gets its fair share of shards by a graceful
// hand-over mid-wave: the holder drains the shards it gives up, writes their last checkpoints and lets their
// leases go; the joining node resumes them from those checkpoints, so no push goes out twice. Real PostgreSQL,
// real simulator over TLS loopback, nodes in one process (ClusterNodeTests.node).
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

@Suite(.serialized, .ownThread) struct RebalancingTests {
    @Test func aNodeJoiningMidWaveGetsItsShareByAGracefulHandover() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        // The wave's pace is the simulator's (4 shards x 10 streams at 500 ms a push: 80 pushes/s, 100 s for the
        // 8,000 tokens), not the machine's: the hand-over (about 7 s) comes mid-wave however loaded it is.
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 500_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        // 10 s leases: a renewal starved for a few seconds on a loaded machine must not cost a lease here.
        let a = try ClusterNodeTests.node("a", harness, postgres, lease: .seconds(10), streams: 10)
        a.cluster.start()
        defer {
            a.engine.shutdown()
            a.cluster.stop()
        }
        #expect(
            await eventually(timeout: .seconds(60)) { a.cluster.status.heldShards.count == ClusterNodeTests.shards },
            "alone, A takes every shard: \(a.cluster.status)")
        let count = 8_000
        try a.engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        #expect(await eventually(timeout: .seconds(60)) { a.engine.heldShardTokens == count })
        let id = try a.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))

        let b = try ClusterNodeTests.node("b", harness, postgres, lease: .seconds(10), streams: 10)
        let joined = ContinuousClock.now
        b.cluster.start()
        defer {
            b.engine.shutdown()
            b.cluster.stop()
        }
        let share = ClusterNodeTests.shards / 2
        // A lease round starved past the lease (a machine loaded far beyond what a node is given) costs the node
        // its shards, and a node that lost one takes none until restarted: the hand-over is then not what
        // happened, and the checks below are the ones every take-over must pass (one outcome per token, resends
        // within the checkpoint window).
        func lost() -> Int { a.cluster.status.lostShards.count + b.cluster.status.lostShards.count }
        #expect(
            await eventually(timeout: .seconds(120)) {
                (a.cluster.status.heldShards.count == share && b.cluster.status.heldShards.count == share)
                    || lost() > 0
            }, "each holds half: \(a.cluster.status) \(b.cluster.status)")
        let rebalanced = ContinuousClock.now - joined
        let progress = try #require(try a.engine.report(id: id))
        let handedOver = a.cluster.status.handedOverShards
        if lost() == 0 {
            #expect(handedOver.count == share && Set(handedOver) == Set(b.cluster.status.heldShards))
        }
        let forced = a.cluster.status.forcedHandovers

        #expect(await eventually(timeout: .seconds(300)) { (try? b.engine.report(id: id))??.isComplete == true })
        let report = try #require(try b.engine.report(id: id))
        // A drained hand-over resends nothing; a forced one or a lost lease at most its shard's window.
        let duplicates = try TakeOverChecks.expectOutcome(
            report, harness, count: count, duplicateBound: (forced + lost()) * (ClusterNodeTests.window + 10))
        if lost() == 0 {
            #expect(progress.delivered < count, "the hand-over came mid-wave (\(progress.delivered) of \(count))")
        }
        print(
            "rebalancing: a joining node got \(share) of \(ClusterNodeTests.shards) shards \(rebalanced) after it started "
                + "(lease 10 s, join window 4 s), mid-wave at \(progress.delivered)/\(count) delivered; "
                + "\(forced) forced hand-overs, \(lost()) shards lost, \(duplicates) duplicates")
    }
}

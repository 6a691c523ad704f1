// Issue 24: leases follow the database's clock. A step forward of that clock (NTP, a fail-over to a server whose
// clock runs ahead) ends every lease early in the database while each holder still counts on its own monotonic
// clock: a node below its fair share may then take a lease its holder still uses. Tested here by moving the
// holder's expiry times back in the database (what a step forward of its clock does to them) mid-wave: the
// holder finds out at its next renewal and stops those shards, its later checkpoints are fenced, the taker
// resumes from the last checkpoints, and every token ends with exactly one outcome; resends stay within the
// checkpoint window and carry their first apns-id. docs/deployment.md, "Leases and the database's clock".
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

@Suite(.serialized, .ownThread) struct LeaseClockTests {
    @Test func aDatabaseClockStepForwardLetsATakerInAndTheHolderStops() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 200_000_000)
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        // 10 s leases: only the simulated clock step ends A's leases, not a renewal starved on a loaded machine.
        let a = try ClusterNodeTests.node("a", harness, postgres, lease: .seconds(10))
        a.cluster.start()
        defer {
            a.engine.shutdown()
            a.cluster.stop()
        }
        #expect(await eventually(timeout: .seconds(60)) { a.cluster.status.heldShards.count == 4 })
        let count = 8_000
        try a.engine.register(FanoutFixture.registrations(0..<count, channel: "match"))
        #expect(await eventually(timeout: .seconds(60)) { a.engine.heldShardTokens == count })
        let id = try a.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_001, home: 1, away: 0))
        #expect(await eventually(timeout: .seconds(60)) { ((try? a.engine.report(id: id))??.delivered ?? 0) > 0 })

        // B starts (below its share of 2, taking at once) and, before it has been up a lease (no hand-over yet),
        // the database's clock "steps forward" past A's leases. A renews every second, which puts them back: the
        // step is repeated until B's round comes first, as it may after a real step.
        let b = try ClusterNodeTests.node("b", harness, postgres, lease: .seconds(10), joinWindow: .zero)
        b.cluster.start()
        defer {
            b.engine.shutdown()
            b.cluster.stop()
        }
        #expect(
            await eventually(timeout: .seconds(60)) {
                _ = try? postgres.psql(
                    "UPDATE shard_leases SET expires_at = now() - interval '1 second' WHERE node = 'a'")
                return b.cluster.status.heldShards.count + b.cluster.status.takingShards.count == 2
            }, "B takes two leases the database says expired: \(b.cluster.status)")
        #expect(
            await eventually(timeout: .seconds(60)) { a.cluster.status.lostShards.count == 2 },
            "A finds them gone at its next renewal and stops them: \(a.cluster.status)")
        let lost = Set(a.cluster.status.lostShards)
        #expect(
            await eventually(timeout: .seconds(60)) { lost.isSubset(of: Set(b.cluster.status.heldShards)) },
            "B serves what A lost: \(b.cluster.status)")

        #expect(await eventually(timeout: .seconds(120)) { (try? b.engine.report(id: id))??.isComplete == true })
        let report = try #require(try b.engine.report(id: id))
        // Within the two shards' checkpoint windows.
        let duplicates = try TakeOverChecks.expectOutcome(
            report, harness, count: count, duplicateBound: 2 * (ClusterNodeTests.window + ClusterNodeTests.streams))
        print("lease clock step: \(duplicates) duplicates of \(count), \(report)")
    }
}

// Issue 24: a wave reaches every token registered before it was published, whichever node acknowledged the
// registration. A loaded clean-clone run delivered 10,001 of 20,000: the node started the wave on its shards at
// once, and registrations that came to those shards through the change feed queued behind the wave's start.
// Now a wave carries the registry's feed position at its publish, and a node starts it once it applied that far.
@testable import FanfareCluster
import FanfareCore
import FanfareFanout
import FanfarePostgres
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.serialized, .ownThread) struct WaveAfterRegistrationTests {
    @Test func aWaveWaitsForTheRegistrationsAnotherNodeAcknowledgedBeforeIt() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let a = try ClusterNodeTests.node("a", harness, postgres, joinWindow: .zero)
        defer {
            a.engine.shutdown()
            a.cluster.stop()
        }
        a.cluster.start()
        #expect(
            await eventually(timeout: .seconds(60)) { a.cluster.status.heldShards.count == ClusterNodeTests.shards })
        // Another node's API: a store of its own writes the registrations, so A learns of them only from the feed,
        // and A's feed is behind (paused) when the publish comes, as a client's next call would.
        let writer = try PostgresTokenStore(url: postgres.url)
        defer { try? writer.close() }
        let count = 2_000
        a.cluster.feedPausedForTesting.store(true, ordering: .releasing)
        try writer.register(FanoutFixture.registrations(0..<count, channel: "match"))
        let id = try a.engine.publishShared(scoreUpdate(channel: "match", timestamp: 1_800_000_000, home: 1, away: 0))
        // Published, and not started: nothing of it may go out before the registrations are in A's shards.
        try await Task.sleep(for: .seconds(1))
        let waiting = try #require(try a.engine.report(id: id))
        #expect(!waiting.isComplete && waiting.targeted == 0, "\(waiting)")
        a.cluster.feedPausedForTesting.store(false, ordering: .releasing)
        #expect(await eventually(timeout: .seconds(60)) { (try? a.engine.report(id: id))??.isComplete == true })
        let report = try #require(try a.engine.report(id: id))
        #expect(report.targeted == count && report.delivered == count, "\(report)")
    }
}

// Issue 24's fault campaign found it: the database stalled past a lease (every PostgreSQL process stopped), and
// the first node back saw every other node's heartbeat as old as the stall, counted itself the only live node,
// and took their expired leases; they lost their shards and exited. A node whose own previous heartbeat is older
// than a lease now joins again: it renews what it holds and takes nothing until the others could renew theirs.
@testable import FanfareCluster
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Testing

@Suite(.serialized, .ownThread) struct DatabaseAwayTests {
    @Test func aDatabaseStalledPastTheLeaseCostsNoNodeItsShards() async throws {
        let postgres = try PostgresServer()
        defer { postgres.stop() }
        let harness = try TestHarness(SimulatorConfiguration())
        defer { harness.shutdown() }
        let lease = Duration.seconds(6)
        let a = try ClusterNodeTests.node("a", harness, postgres, lease: lease, joinWindow: .seconds(4))
        let b = try ClusterNodeTests.node("b", harness, postgres, lease: lease, joinWindow: .seconds(4))
        defer {
            for node in [a, b] {
                node.engine.shutdown()
                node.cluster.stop()
            }
        }
        // Started half a renewal apart, so that their lease rounds do not run side by side.
        a.cluster.start()
        try await Task.sleep(for: .seconds(1))
        b.cluster.start()
        let half = ClusterNodeTests.shards / 2
        let shared = await eventually(timeout: .seconds(120)) {
            a.cluster.status.heldShards.count == half && b.cluster.status.heldShards.count == half
        }
        try #require(shared, "\(a.cluster.status) \(b.cluster.status)")
        let before = (a.cluster.status.heldShards, b.cluster.status.heldShards)

        // What the database shows after it stalled for longer than a lease (every node's heartbeat and lease as
        // old as the stall), made in one statement so that no round of either node falls in between: the first
        // node to run its round then finds the other's heartbeat stale and its leases expired.
        _ = try postgres.psql(
            """
            BEGIN;
            UPDATE cluster_nodes SET seen_at = now() - interval '20 seconds';
            UPDATE shard_leases SET expires_at = now() - interval '1 second';
            COMMIT;
            """)

        // Back: both renew (each round after the stall heartbeats first, then renews), and after the join window
        // each takes up to its share of what is free: nothing, as nothing was lost.
        let renewed = await eventually(timeout: .seconds(120)) {
            let holders =
                (try? postgres.psql(
                    "SELECT count(*) FROM shard_leases WHERE expires_at > now() + interval '2 seconds'")) ?? ""
            return holders == "\(ClusterNodeTests.shards)"
        }
        #expect(renewed, "every lease renewed after the stall")
        try await Task.sleep(for: .seconds(6))  // past the join window: a node that would take, has taken
        #expect(
            a.cluster.status.lostShards.isEmpty && b.cluster.status.lostShards.isEmpty,
            "\(a.cluster.status) \(b.cluster.status)")
        #expect((a.cluster.status.heldShards, b.cluster.status.heldShards) == before)
    }
}

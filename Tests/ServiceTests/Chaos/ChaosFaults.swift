// The campaign's faults, each injected mid-wave and ended the way the real one ends: a killed node is started
// again by the supervisor; a stopped node is resumed (it finds its leases gone and exits 75, then is started
// again); the database is started again or resumed; a cut node's path carries packets again; a joining node
// settles; a rolling restart is SIGTERM and start, one node at a time.
import FanfareTestSupport
import Foundation
import Glibc
import Testing

enum ChaosFaults {
    static func inject(_ scenario: ChaosScenario, into cluster: ChaosCluster, prober: ChaosProber) async throws {
        switch scenario {
        case .killNode: try await killNode(cluster, prober: prober)
        case .stopNodePastLease: try await stopNodePastLease(cluster, prober: prober)
        case .restartDatabase: try await restartDatabase(cluster)
        case .freezeDatabase: try await freezeDatabase(cluster)
        case .cutNodeFromDatabase: try await cutNodeFromDatabase(cluster, prober: prober)
        case .nodeJoins: try await nodeJoins(cluster)
        case .rollingRestart: try await rollingRestart(cluster)
        }
    }

    /// SIGKILL of A; the supervisor starts it again at once (a new run, which rejoins and gets its share).
    static func killNode(_ cluster: ChaosCluster, prober: ChaosProber) async throws {
        let a = try #require(cluster.node("a"))
        // A request A had taken when it died gets a reset: that is the fault.
        prober.excuse(a)
        cluster.expectExit("a", status: SIGKILL)
        a.signal(SIGKILL)
    }

    /// SIGSTOP of B until the others hold its shards, then SIGCONT: B must send nothing more, see its leases
    /// gone and exit 75 (the supervisor starts it again).
    static func stopNodePastLease(_ cluster: ChaosCluster, prober: ChaosProber) async throws {
        let b = try #require(cluster.node("b"))
        prober.excuse(b)
        b.signal(SIGSTOP)
        let taken = await eventually(timeout: .seconds(120)) {
            let holders = (try? cluster.leaseHolders()) ?? [:]
            return holders["b"] == nil && holders.values.reduce(0, +) == ChaosCluster.shards
        }
        b.signal(SIGCONT)
        #expect(taken, "A and C took B's shards: \((try? cluster.leaseHolders()) ?? [:])")
        #expect(await b.waitForExit() == 75, "B resumed, found its leases gone: \(b.errors.suffix(1500))")
    }

    /// `pg_ctl stop -m immediate` (what a crash leaves), two seconds down, started again.
    static func restartDatabase(_ cluster: ChaosCluster) async throws {
        try await ChaosCluster.onOwnThread { try cluster.postgres.stopKeepingData(immediate: true) }
        try await Task.sleep(for: .seconds(2))
        try await ChaosCluster.onOwnThread { try cluster.postgres.start() }
    }

    /// Every PostgreSQL process stopped (a stalled database machine: connections stay open, nothing answers),
    /// then resumed.
    static func freezeDatabase(_ cluster: ChaosCluster) async throws {
        let processes = cluster.postgres.serverProcessIDs
        try #require(!processes.isEmpty)
        for pid in processes { kill(pid, SIGSTOP) }
        try await Task.sleep(for: .seconds(cluster.size.frozenSeconds))
        for pid in processes { kill(pid, SIGCONT) }
    }

    /// B's path to PostgreSQL goes silent (its proxy holds every byte) until A and C hold B's shards; then it
    /// carries packets again, and B must find its leases gone and exit 75.
    static func cutNodeFromDatabase(_ cluster: ChaosCluster, prober: ChaosProber) async throws {
        let b = try #require(cluster.node("b"))
        let proxy = try #require(cluster.proxy("b"))
        // B's API waits on its database calls while cut off: that is the fault.
        prober.excuse(b)
        proxy.mode = .silent
        let taken = await eventually(timeout: .seconds(120)) {
            let holders = (try? cluster.leaseHolders()) ?? [:]
            return holders["b"] == nil && holders.values.reduce(0, +) == ChaosCluster.shards
        }
        proxy.mode = .forward
        #expect(taken, "A and C took B's shards: \((try? cluster.leaseHolders()) ?? [:])")
        #expect(await b.waitForExit() == 75, "B, back, found its leases gone: \(b.errors.suffix(1500))")
    }

    /// Node D starts mid-wave and gets its share by a graceful hand-over.
    static func nodeJoins(_ cluster: ChaosCluster) async throws {
        try await cluster.start("d")
        let joined = await eventually(timeout: .seconds(120)) {
            await cluster.sharesSettled(among: ["a", "b", "c", "d"])
        }
        let held = await cluster.held()
        #expect(joined, "D serves its share: \(held)")
    }

    /// Each node in turn: SIGTERM (it hands its shards over and exits 0), started again, serving its share.
    static func rollingRestart(_ cluster: ChaosCluster) async throws {
        for name in ["a", "b", "c"] {
            let node = try #require(cluster.node(name))
            cluster.manage(name, true)
            node.signal(SIGTERM)
            let status = await node.waitForExit()
            cluster.recordExit(name, node, expected: false)
            #expect(status == 0, "\(name) stops cleanly: \(node.errors.suffix(1500))")
            try await cluster.start(name)
            cluster.manage(name, false)
            let back = await eventually(timeout: .seconds(120)) {
                await cluster.sharesSettled(among: ["a", "b", "c"])
            }
            let held = await cluster.held()
            #expect(back, "\(name) serves its share again: \(held)")
        }
    }
}

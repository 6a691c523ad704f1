import FanfareCore
@testable import FanfarePostgres
import FanfareStorage
import FanfareTestSupport
import Foundation
import PostgresNIO
import Testing

/// Issue 22: fencing by lease. A node stopped inside a transaction (SIGSTOP, a frozen VM) holds its row and
/// advisory locks; a live node ends its sessions once its heartbeat is older than a lease, and what waited on
/// those locks goes on. A node that still heartbeats and a client that is no node (`fanfare import`) keep their
/// sessions however long their transactions idle. Run as a role that is no superuser, as a deployment is.
extension PostgresSuites {
    @Suite("PostgresTokenStore: a live node ends the sessions of a stalled one", .serialized)
    struct FencingTests {
        /// Long beside the moment between the slow node's heartbeat and the live node's fencing in one round.
        static let lease: Duration = .seconds(4)
        /// Liveness bounds only: a loaded machine may be slow, never too fast.
        static let patience: Duration = .seconds(60)

        /// A server with a role that is no superuser owning database `nodes`; the role's URL.
        static func nodesDatabase(_ server: PostgresServer) throws -> String {
            _ = try server.psql("CREATE ROLE fanfare_node LOGIN NOSUPERUSER", database: "postgres")
            _ = try server.psql("CREATE DATABASE nodes OWNER fanfare_node", database: "postgres")
            return "postgres://fanfare_node@127.0.0.1:\(server.port)/nodes"
        }

        /// Sessions in `nodes` named after `incarnation`.
        static func sessions(_ server: PostgresServer, _ incarnation: NodeIncarnation) throws -> Int {
            Int(
                try server.psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = 'nodes' AND application_name = '\(incarnation.sessionName)'",
                    database: "nodes")) ?? -1
        }

        @Test func aStalledNodesLocksGoOnceItsHeartbeatIsOlderThanALease() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let url = try Self.nodesDatabase(server)
            let lease = Self.lease
            // A store that is no node: completes a wave (what node C's completion did behind node B's lock).
            let completer = try PostgresTokenStore(url: url)
            defer { try? completer.close() }
            try completer.saveWave(makeWave(1))
            try completer.saveWave(makeWave(2))
            let (liveRun, stalledRun, slowRun) = (NodeIncarnation(), NodeIncarnation(), NodeIncarnation())
            let live = try PostgresTokenStore(url: url, incarnation: liveRun)
            defer { try? live.close() }
            let stalled = try PostgresTokenStore(url: url, incarnation: stalledRun)
            defer { try? stalled.close() }
            // The slow node: its checkpoint store idles in a transaction, its lease store keeps heartbeating.
            let slow = try PostgresTokenStore(url: url, incarnation: slowRun)
            defer { try? slow.close() }
            let slowLeases = try PostgresTokenStore(url: url, incarnation: slowRun)
            defer { try? slowLeases.close() }
            // `fanfare import` beside a CPU hog: no node, its transaction idles too.
            let importer = try PostgresTokenStore(url: url)
            defer { try? importer.close() }
            _ = try live.heartbeat(node: "live", incarnation: liveRun, window: lease)
            _ = try stalled.heartbeat(node: "stalled", incarnation: stalledRun, window: lease)
            _ = try slowLeases.heartbeat(node: "slow", incarnation: slowRun, window: lease)
            #expect(try Self.sessions(server, stalledRun) == 1)

            // Checkpoints stopped inside their transactions: each holds its wave row FOR SHARE.
            let stalledCheckpoint = HeldTransaction(stalled, locking: "SELECT id FROM waves WHERE id = 1 FOR SHARE")
            let slowCheckpoint = HeldTransaction(slow, locking: "SELECT id FROM waves WHERE id = 2 FOR SHARE")
            let slowImport = HeldTransaction(importer, locking: "SELECT pg_advisory_xact_lock(22)")
            #expect(
                waitUntil(timeout: Self.patience) {
                    stalledCheckpoint.isHolding && slowCheckpoint.isHolding && slowImport.isHolding
                })
            // The completion waits for the stalled checkpoint's lock.
            let completion = HeldTransaction(completer, locking: "SELECT id FROM waves WHERE id = 1 FOR UPDATE")

            // The live node's lease rounds (the slow node heartbeats right before each): the stalled node is fenced
            // once its heartbeat is older than the lease, and the completion takes the lock.
            var fenced: [FencedNode] = []
            func round() throws -> Bool {
                _ = try live.heartbeat(node: "live", incarnation: liveRun, window: lease)
                _ = try slowLeases.heartbeat(node: "slow", incarnation: slowRun, window: lease)
                fenced += try live.fenceStalledNodes(sparing: liveRun, silentLongerThan: lease)
                return true
            }
            let proceeded = try waitUntil(timeout: Self.patience) { try round() && completion.isHolding }
            #expect(proceeded, "the completion waiting on the stalled node's lock proceeds")
            #expect(
                fenced.first
                    == FencedNode(node: "stalled", incarnation: stalledRun.hex, sessionsEnded: 1, sessionsRefused: 0),
                "\(fenced)")
            #expect(try Self.sessions(server, stalledRun) == 0)
            // What the stalled node did in that transaction is rolled back: its commit fails once it resumes.
            stalledCheckpoint.release()
            #expect(waitUntil(timeout: Self.patience) { stalledCheckpoint.result != nil })
            #expect(throws: RegistryError.self) { try stalledCheckpoint.result?.get() }

            // The slow node and the import idle in their transactions for two leases, through more rounds.
            let idled = try waitUntil(timeout: Self.patience * 2) {
                try round() && slowCheckpoint.age > lease * 2 && slowImport.age > lease * 2
            }
            #expect(idled)
            slowCheckpoint.release()
            slowImport.release()
            completion.release()
            #expect(
                waitUntil(timeout: Self.patience) {
                    slowCheckpoint.result != nil && slowImport.result != nil && completion.result != nil
                })
            #expect(throws: Never.self, "the slow node's transaction commits") { try slowCheckpoint.result?.get() }
            #expect(throws: Never.self, "the import's transaction commits") { try slowImport.result?.get() }
            #expect(throws: Never.self) { try completion.result?.get() }
            #expect(fenced.allSatisfy { $0.node == "stalled" }, "only the stalled node was fenced: \(fenced)")
            #expect(slow.connectionsOpened == 1 && slowLeases.connectionsOpened == 1 && importer.connectionsOpened == 1)

            // A node never ends its own sessions, even with its heartbeat as old as a stalled node's.
            _ = try server.psql(
                "UPDATE cluster_nodes SET seen_at = now() - interval '1 hour' WHERE node = 'live'", database: "nodes")
            #expect(try live.fenceStalledNodes(sparing: liveRun, silentLongerThan: lease).isEmpty)
            #expect(try live.count() == 0 && live.connectionsOpened == 1)
            // Resumed, the stalled node finds its session gone and goes on with a new one.
            #expect(try stalled.count() == 0 && stalled.connectionsOpened == 2)
        }

        /// Every session names its client: a node's store, its lanes and its listener the node's run, any other
        /// client `fanfare` (never fenced).
        @Test func sessionsNameTheNodeRunTheyBelongTo() throws {
            try withDatabase(.postgres) { database in
                let url = try #require(database.url)
                let run = NodeIncarnation()
                let node = try PostgresTokenStore(url: url, incarnation: run)
                defer { try? node.close() }
                let plain = try PostgresTokenStore(url: url)
                defer { try? plain.close() }
                let listener = try PostgresNotificationListener(
                    url: url, channels: [PostgresTokenStore.waveChannel], incarnation: run,
                    logger: Logger(label: "test")
                ) { _ in }
                defer { listener.stop() }
                let named = { (name: String) in
                    try database.scalar(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = '\(name)'",
                        plain)
                }
                #expect(
                    try waitUntil(timeout: Self.patience) { try named("fanfare-node \(run.hex)") == 2 },
                    "the node's store and its listener")
                #expect(try named("fanfare") == 1)
                #expect(run.hex.utf8.count == 16 && NodeIncarnation(hex: run.hex) == run && NodeIncarnation() != run)
                #expect(NodeIncarnation(hex: "0123456789ABCDEF") == nil && NodeIncarnation(hex: "0123") == nil)
            }
        }
    }
}

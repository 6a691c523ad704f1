import FanfareCore
import FanfarePostgres
import FanfareStorage
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// A dropped connection (the session terminated by the server's operator, or the server restarted) fails at most
/// the call that met it: the next call runs on a new connection (with its own temporary table), and read-only
/// calls that met the drop run again on it at once.
extension PostgresSuites {
    @Suite("PostgresTokenStore: reconnecting after a dropped connection", .serialized)
    struct ReconnectTests {
        /// Terminates the store's sessions (every client session of the test user but psql's own); how many.
        static func terminateSessions(_ server: PostgresServer) throws -> Int {
            Int(
                try server.psql(
                    """
                    SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                    WHERE usename = 'fanfare' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                    """)) ?? -1
        }

        /// Runs a write that may meet the drop: it either succeeds or fails with `.unavailable` naming the
        /// operation (never another error, never a trap). Whether it succeeded.
        static func writeMeetingTheDrop(_ operation: String, _ body: () throws -> Void) -> Bool {
            do {
                try body()
                return true
            } catch let RegistryError.unavailable(message) {
                #expect(message.contains(operation), "\(message)")
                return false
            } catch {
                Issue.record("not an unavailable error: \(error)")
                return false
            }
        }

        @Test func aTerminatedSessionCostsAtMostTheCallThatMetIt() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let store = try PostgresTokenStore(url: server.url)
            defer { try? store.close() }
            try store.register((0..<100).map { updateRegistration($0) })
            try store.saveWave(makeWave(1))
            #expect(store.connectionsOpened == 1)

            // Reads: retried on a new connection, so they answer right away.
            #expect(try Self.terminateSessions(server) == 1)
            #expect(try store.count() == 100)
            #expect(try Self.terminateSessions(server) == 1)
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).map(\.record.id) == [1])
            #expect(try Self.terminateSessions(server) == 1)
            #expect(try store.lastWaveID() == 1)

            // Writes: the one that meets the drop may fail (nothing of it is written); the next one works, on a new
            // connection with its own temporary table (registration copies into it).
            #expect(try Self.terminateSessions(server) == 1)
            let registered = Self.writeMeetingTheDrop("registering 1 tokens") {
                try store.register([updateRegistration(100)])
            }
            try store.register((101..<200).map { updateRegistration($0) })
            let stored = try store.all()
            #expect(stored.count == (registered ? 200 : 199))
            #expect((stored[makeToken(100)] != nil) == registered)

            #expect(try Self.terminateSessions(server) == 1)
            let checkpointed = Self.writeMeetingTheDrop("saving 1 wave checkpoints") {
                try store.saveCheckpoints([WaveCheckpoint(waveID: 1, shard: 0, data: [1], savedAt: 1)])
            }
            try store.saveCheckpoints([WaveCheckpoint(waveID: 1, shard: 1, data: [2], savedAt: 2)])
            let checkpoints = try store.unfinishedWaves(bundleID: testBundle, environment: .production).first?
                .checkpoints
            #expect(checkpoints?.map(\.shard) == (checkpointed ? [0, 1] : [1]))
            #expect(store.connectionsOpened >= 5 && store.connectionsOpened <= 7, "\(store.connectionsOpened)")
        }

        /// The session ended while the store's transaction waits between two statements (a stalled node fenced,
        /// issue 22): postgres-nio never answers a statement written to the closed connection, so the store fails
        /// the call once the connection closes, and the next call runs on a new one.
        @Test func aSessionEndedInsideATransactionFailsThatCallAndNoMore() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let store = try PostgresTokenStore(url: server.url)
            defer { try? store.close() }
            let held = HeldTransaction(store, locking: "SELECT pg_advisory_xact_lock(22)")
            #expect(waitUntil(timeout: .seconds(60)) { held.isHolding })
            #expect(try Self.terminateSessions(server) == 1)
            #expect(
                waitUntil(timeout: .seconds(60)) { held.result != nil }, "the call fails instead of waiting for ever")
            held.release()
            // The session was ended under it: the database is out of reach for that call (503 at the API).
            guard case .failure(.unavailable(let message)) = held.result else {
                Issue.record("not an unavailable error: \(String(describing: held.result))")
                return
            }
            #expect(message.contains("holding a lock"), "\(message)")
            #expect(try store.count() == 0)
            #expect(store.connectionsOpened == 2)
        }

        /// Issue 24: a server that stops answering (frozen, or a network that drops without a reset) fails the call
        /// after the store's `callTimeout` with `.unavailable`, and the next call runs on a new connection. Before,
        /// the call, and every caller queued behind the store's lock, waited for as long as TCP kept trying.
        @Test func aSessionThatStopsAnsweringFailsTheCallWithinItsTimeLimit() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            // Long enough for every call of a loaded machine (scaled like every liveness bound), short for a test.
            let store = try PostgresTokenStore(url: server.url, callTimeout: TestTime.scaled(.seconds(3)))
            defer { try? store.close() }
            try store.register((0..<5).map { updateRegistration($0) })
            // The store's session process, frozen: its socket stays open and the kernel acknowledges what is sent.
            let backend = try #require(
                Int32(
                    try server.psql(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = 'fanfare' AND pid <> pg_backend_pid()"
                    )))
            #expect(kill(backend, SIGSTOP) == 0)
            defer { kill(backend, SIGCONT) }
            // A write is not retried: it fails, saying why (a read would run once more on a new connection).
            #expect {
                try store.register([updateRegistration(5)])
            } throws: { error in
                guard case RegistryError.unavailable(let message) = error else { return false }
                return message.contains("did not answer within")
            }
            #expect(try store.count() == 5, "the next call runs on a new connection; the write was not made")
            #expect(store.connectionsOpened == 2)
        }

        /// Issue 24: the network path to the database goes silent (a proxy that stops carrying bytes, as a cut
        /// link does: no reset, no answer). A call fails `.unavailable` within the store's time limit instead of
        /// hanging, calls keep failing clearly while the path is down, and work again once it is back.
        @Test func aSilentPathToTheDatabaseFailsCallsClearlyUntilItIsBack() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let proxy = try TCPProxy(targetPort: server.port)
            defer { proxy.stop() }
            let url = "postgres://\(PostgresServer.user)@127.0.0.1:\(proxy.port)/\(PostgresServer.database)"
            let store = try PostgresTokenStore(url: url, callTimeout: TestTime.scaled(.seconds(3)))
            defer { try? store.close() }
            try store.register((0..<5).map { updateRegistration($0) })
            proxy.mode = .silent
            for _ in 0..<2 {
                #expect {
                    _ = try store.count()
                } throws: { error in
                    guard case RegistryError.unavailable = error else { return false }
                    return true
                }
            }
            proxy.mode = .forward
            // Hang guard only: the first call after the path is back may still meet the connection it abandoned.
            let deadline = ContinuousClock.now + TestTime.scaled(Liveness.condition)
            var counted: Int?
            while counted == nil && ContinuousClock.now < deadline { counted = try? store.count() }
            #expect(counted == 5, "calls work again once the path is back")
        }

        /// Issue 24: a live node fences a stalled node's run every lease round, and ends each new session of that
        /// run as it starts; a call of that run must fail or succeed, never wait for ever in the connect (a node's
        /// lease thread hung there for good, found by the loaded run of ClusterNodeTests).
        @Test func callsOfARunBeingFencedOverAndOverEachEnd() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let run = NodeIncarnation()
            let stalled = try PostgresTokenStore(url: server.url, incarnation: run, callTimeout: .seconds(3600))
            defer { try? stalled.close() }
            _ = try stalled.heartbeat(node: "stalled", incarnation: run, window: .milliseconds(100))
            let live = try PostgresTokenStore(url: server.url, incarnation: NodeIncarnation())
            defer { try? live.close() }
            usleep(200_000)
            let done = Atomic<Bool>(false)
            let fencer = Thread {
                while !done.load(ordering: .acquiring) {
                    _ = try? live.fenceStalledNodes(sparing: NodeIncarnation(), silentLongerThan: .milliseconds(100))
                }
            }
            fencer.start()
            defer { done.store(true, ordering: .releasing) }
            let calls = Atomic<Int>(0)
            Thread {
                for _ in 0..<300 {
                    _ = try? stalled.count()
                    calls.add(1, ordering: .relaxed)
                }
            }.start()
            // Hang guard only: each call ends as soon as its session is ended or answers.
            let deadline = ContinuousClock.now + TestTime.scaled(Liveness.condition)
            while calls.load(ordering: .relaxed) < 300 && ContinuousClock.now < deadline { usleep(10_000) }
            #expect(calls.load(ordering: .relaxed) == 300, "a call of the fenced run hung")
        }

        @Test func aRestartedServerIsReconnectedToAndADownOneIsUnavailable() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let store = try PostgresTokenStore(url: server.url)
            defer { try? store.close() }
            try store.register((0..<50).map { updateRegistration($0) })

            try server.restart()
            #expect(try store.count() == 50)
            try store.register((50..<60).map { updateRegistration($0) })
            #expect(try store.count() == 60)

            // While the server is down every call fails with `.unavailable` saying it cannot connect; none traps.
            try server.stopKeepingData()
            for _ in 0..<3 {
                #expect {
                    _ = try store.count()
                } throws: { error in
                    guard case RegistryError.unavailable(let message) = error else { return false }
                    return message.contains("counting tokens") && message.contains("cannot connect to PostgreSQL")
                }
            }
            #expect(throws: RegistryError.self) { try store.register([updateRegistration(60)]) }
            try server.start()
            try store.register([updateRegistration(61)])
            #expect(try store.count() == 61)
        }
    }
}

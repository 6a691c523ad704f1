import FanfarePostgres
import FanfareStorage
import FanfareTestSupport
import Foundation
import Glibc
import Testing

extension PostgresSuites {
    @Suite("PostgresServer: a real PostgreSQL for the tests")
    struct PostgresServerTests {
        @Test func startsAnswersAndStops() throws {
            let server = try PostgresServer()
            #expect(server.isRunning)
            #expect(try server.psql("SELECT 40 + 2") == "42")
            #expect(try server.psql("SHOW listen_addresses") == "127.0.0.1")
            // postgres-nio connects too (the store migrates the schema on open).
            let store = try PostgresTokenStore(url: server.url)
            #expect(try store.count() == 0)
            #expect(
                try server.psql("SELECT max(version) FROM schema_version") == String(PostgresTokenStore.schemaVersion))
            try store.close()

            let pid = try #require(server.postmasterPID)
            server.stop()
            #expect(kill(pid, 0) != 0)  // the postmaster is gone
            #expect(!FileManager.default.fileExists(atPath: server.directory))
            server.stop()  // idempotent
        }

        @Test func anUnreachableServerIsAClearError() throws {
            let server = try PostgresServer()
            let url = server.url
            server.stop()
            #expect {
                _ = try PostgresTokenStore(url: url)
            } throws: { error in
                // Unavailable, not a storage fault: the same call may work once the server runs.
                guard case RegistryError.unavailable(let message) = error else { return false }
                return message.contains("cannot connect to PostgreSQL at \(url)")
            }
        }

        @Test(arguments: [
            "mysql://fanfare@127.0.0.1/fanfare", "postgres://127.0.0.1/fanfare", "postgres://fanfare@/fanfare",
            "postgres://fanfare@127.0.0.1:70000/fanfare", "not a url",
        ])
        func badURLsAreRefused(url: String) {
            #expect(throws: RegistryError.self) { _ = try PostgresTokenStore(url: url) }
        }

        @Test func passwordsStayOutOfErrors() throws {
            let server = try PostgresServer()
            let url = "postgres://fanfare:s3cret@127.0.0.1:\(server.port)/nonexistent"
            do {
                _ = try PostgresTokenStore(url: url)
                Issue.record("opened a database that does not exist")
            } catch {
                #expect(!"\(error)".contains("s3cret"))
                #expect("\(error)".contains("nonexistent"))
            }
        }
    }
}

extension PostgresSuites {
    @Suite("PostgresTokenStore: schema migrations")
    struct PostgresSchemaTests {
        @Test func reopeningKeepsDataAndANewerSchemaIsRefused() throws {
            let server = try PostgresServer()
            do {
                let store = try PostgresTokenStore(url: server.url)
                try store.register([updateRegistration(1)])
                try store.close()
            }
            let reopened = try PostgresTokenStore(url: server.url)
            #expect(try reopened.count() == 1)
            #expect(try server.psql("SELECT count(*) FROM schema_version") == String(PostgresTokenStore.schemaVersion))
            try reopened.close()

            _ = try server.psql("INSERT INTO schema_version (version, name) VALUES (99, 'from the future')")
            #expect {
                _ = try PostgresTokenStore(url: server.url)
            } throws: { error in
                guard case RegistryError.storage(let message) = error else { return false }
                return message.contains("newer Fanfare")
            }
        }

        /// What migrations 9 (broadcast subscriptions, ledger, links) and 10 (waves' registry positions) added,
        /// undone.
        static let undoMigrationsFrom9 = """
            DROP TABLE broadcast_subscriptions, subscription_channels, token_history, broadcast_links;
            DROP INDEX tokens_by_device, tokens_by_activity;
            ALTER TABLE waves DROP COLUMN published_subscribers, DROP COLUMN broadcast_flags,
                DROP COLUMN registry_position;
            ALTER TABLE cluster_nodes DROP COLUMN accepting;
            DELETE FROM schema_version WHERE version >= 9;
            """

        /// A database of schema version 1 (tokens only) gains the tables of the later versions and keeps its tokens.
        @Test func aVersion1DatabaseGainsTheWaveTablesAndKeepsItsTokens() throws {
            let server = try PostgresServer()
            let registrations = (0..<300).map { updateRegistration($0, channels: ["match-\($0 % 4)"]) }
            do {
                let store = try PostgresTokenStore(url: server.url)
                try store.register(registrations)
                try store.close()
            }
            // Back to what version 1 left (what versions 2 to 5 changed undone).
            _ = try server.psql(
                """
                \(Self.undoMigrationsFrom9)
                DROP TABLE wave_checkpoints, waves, channel_latest, pending_retirements, pruned_wave_ids, idempotency_keys;
                DROP TRIGGER tokens_inserted ON tokens; DROP TRIGGER tokens_updated ON tokens;
                DROP TRIGGER tokens_deleted ON tokens; DROP FUNCTION fanfare_log_token_changes();
                DROP TABLE cluster_config, shard_leases, cluster_nodes, token_changes; DROP SEQUENCE token_change_seq;
                ALTER TABLE tokens DROP COLUMN shard_hash;
                ALTER TABLE tokens ADD CONSTRAINT tokens_app_id_fkey FOREIGN KEY (app_id) REFERENCES apps (id);
                DELETE FROM schema_version WHERE version >= 2
                """)
            let store = try PostgresTokenStore(url: server.url)
            defer { try? store.close() }
            #expect(
                try server.psql("SELECT max(version) FROM schema_version") == String(PostgresTokenStore.schemaVersion))
            #expect(try store.count() == 300)
            #expect(try server.psql("SELECT count(*) FROM pg_constraint WHERE conname = 'tokens_app_id_fkey'") == "0")
            let stored = try store.all()
            for registration in registrations { #expect(stored[registration.token] == registration.sortedChannels) }
            try store.saveWave(makeWave(1))
            #expect(try store.unfinishedWaves(bundleID: testBundle, environment: .production).count == 1)
            #expect(try store.lastWaveID() == 1)
        }

        /// A database of schema version 7 gains the nodes' incarnations (migration 8); a node row from before has
        /// none (so it is never fenced) until that node heartbeats again.
        @Test func aVersion7DatabaseGainsNodeIncarnations() throws {
            try withDatabase(.postgres) { database in
                let first = try #require(try database.open() as? PostgresTokenStore)
                _ = try first.heartbeat(node: "before", window: .seconds(6))
                try database.execute(
                    Self.undoMigrationsFrom9
                        + "ALTER TABLE cluster_nodes DROP COLUMN incarnation; DELETE FROM schema_version WHERE version >= 8",
                    first)
                try first.close()
                let run = NodeIncarnation()
                let url = try #require(database.url)
                let store = try PostgresTokenStore(url: url, incarnation: run)
                defer { try? store.close() }
                #expect(
                    try database.scalar("SELECT max(version) FROM schema_version", store)
                        == Int64(PostgresTokenStore.schemaVersion))
                #expect(
                    try database.scalar(
                        "SELECT count(*) FROM cluster_nodes WHERE node = 'before' AND incarnation IS NULL", store) == 1)
                _ = try store.heartbeat(node: "after", incarnation: run, window: .seconds(6))
                // A heartbeat without an incarnation keeps the one recorded.
                _ = try store.heartbeat(node: "after", window: .seconds(6))
                #expect(
                    try database.scalar(
                        "SELECT count(*) FROM cluster_nodes WHERE node = 'after' AND incarnation = '\(run.hex)'", store)
                        == 1)
            }
        }
    }
}

extension PostgresSuites {
    @Suite("PostgresServer: servers of dead test processes")
    struct AbandonedServerTests {
        /// A pid no process has (searched from the top of the usual range down).
        static func deadPID() -> pid_t? {
            for pid in stride(from: pid_t(4_194_000), to: 4_000_000, by: -1) where kill(pid, 0) == -1 && errno == ESRCH
            {
                return pid
            }
            return nil
        }

        @Test func aServerWhoseOwnerDiedIsStoppedByTheNextRun() throws {
            let server = try PostgresServer()
            defer { server.stop() }
            let ownerFile = server.directory + "/owner.pid"
            #expect(try String(contentsOfFile: ownerFile, encoding: .utf8) == String(getpid()))
            // Owned by a live process (us): left alone.
            PostgresServer.stopAbandonedServers()
            #expect(server.isRunning)
            let postmaster = try #require(server.postmasterPID)

            // As if the test process that started it had died.
            let dead = try #require(Self.deadPID())
            try String(dead).write(toFile: ownerFile, atomically: true, encoding: .utf8)
            #expect(PostgresServer.stopAbandonedServers() >= 1)
            #expect(kill(postmaster, 0) == -1)
            #expect(!FileManager.default.fileExists(atPath: server.directory))
        }

        @Test func theSharedServerHandsOutAFreshDatabasePerTest() throws {
            let server = try PostgresServer.shared()
            #expect(try PostgresServer.shared() === server)
            let first = try server.createDatabase()
            let second = try server.createDatabase()
            #expect(first != second)
            _ = try server.psql("CREATE TABLE marker (x int); INSERT INTO marker VALUES (1)", database: first)
            #expect(
                try server.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'marker'", database: second) == "0")
            try server.dropDatabase(first)
            try server.dropDatabase(second)
            #expect(
                try server.psql(
                    "SELECT count(*) FROM pg_database WHERE datname IN ('\(first)', '\(second)')", database: "postgres")
                    == "0")
        }
    }
}

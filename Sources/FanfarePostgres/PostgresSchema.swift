import Logging
import PostgresNIO

/// The registry's tables on PostgreSQL, as numbered migrations recorded in `schema_version` (the counterpart of
/// FanfareSQLite's RegistrySchema). Add a migration for every change; never edit one that has shipped.
/// Several nodes may start at once on one database: migrating holds a transaction-scoped advisory lock, so one
/// node migrates and the others wait for it and then find nothing left to do.
enum PostgresSchema {
    struct Migration {
        let version: Int
        let name: String
        let statements: [String]
    }

    /// Any 64-bit number the nodes agree on ("fanfare" in ASCII).
    static let migrationLockKey: Int64 = 0x66_61_6e_66_61_72_65

    static let migrations: [Migration] = [
        Migration(
            version: 1, name: "apps, tokens",
            statements: [
                // One row per (bundle id, environment); tokens refer to it by id, like the SQLite registry.
                """
                CREATE TABLE apps (
                    id bigserial PRIMARY KEY,
                    bundle_id text NOT NULL,
                    environment smallint NOT NULL,
                    UNIQUE (bundle_id, environment)
                )
                """,
                // The token is the key (several nodes write, so no node-local index can stand in for it as in SQLite).
                // Channels are an array on the row: a token follows a handful, and registering rewrites them whole.
                """
                CREATE TABLE tokens (
                    token bytea PRIMARY KEY,
                    kind smallint NOT NULL,
                    activity_id text,
                    device_id text,
                    attributes_type text,
                    app_id bigint NOT NULL REFERENCES apps (id),
                    frequent boolean NOT NULL,
                    supports_broadcast boolean NOT NULL,
                    channels text[] NOT NULL,
                    created_at bigint NOT NULL,
                    last_seen_at bigint NOT NULL
                )
                """,
                "CREATE INDEX tokens_by_app ON tokens (app_id)",
                // The push-to-start replacement rule looks tokens up by (app, device, attributes type).
                "CREATE INDEX tokens_push_to_start_by_device ON tokens (app_id, device_id, attributes_type) WHERE kind = 1",
                // Age retirement deletes update tokens by creation time.
                "CREATE INDEX tokens_by_kind_created_at ON tokens (kind, created_at)",
            ]),
        Migration(
            version: 2, name: "waves",
            statements: [
                // Durable waves (WaveStore), as SQLite's "v3: waves" plus its v4 broadcast columns: one row per
                // published wave, written before `publish` returns; `completed_at` stays NULL until the final report
                // is written into the same row. Ids are given by the engine.
                """
                CREATE TABLE waves (
                    id bigint PRIMARY KEY,
                    app_id bigint NOT NULL REFERENCES apps (id),
                    channel text NOT NULL,
                    event text NOT NULL,
                    timestamp bigint NOT NULL,
                    priority text NOT NULL,
                    has_alert boolean NOT NULL,
                    payload bytea NOT NULL,
                    fresh_until bigint,
                    collapse_id text,
                    dismissal_date bigint,
                    published_at bigint NOT NULL,
                    shard_count bigint NOT NULL,
                    start_keys bytea NOT NULL,
                    broadcast_channel_id text,
                    channel_payload bytea,
                    completed_at bigint,
                    targeted bigint NOT NULL DEFAULT 0,
                    sent bigint NOT NULL DEFAULT 0,
                    delivered bigint NOT NULL DEFAULT 0,
                    failed bigint NOT NULL DEFAULT 0,
                    superseded bigint NOT NULL DEFAULT 0,
                    downgraded bigint NOT NULL DEFAULT 0,
                    expired bigint NOT NULL DEFAULT 0,
                    invalidated bigint NOT NULL DEFAULT 0,
                    retried bigint NOT NULL DEFAULT 0,
                    possible_duplicates bigint NOT NULL DEFAULT 0,
                    resent_after_restart bigint NOT NULL DEFAULT 0,
                    restarts bigint NOT NULL DEFAULT 0,
                    failed_by_reason text NOT NULL DEFAULT '',
                    time_to_first_ack bigint,
                    makespan bigint,
                    report_broadcast_channel_id text,
                    broadcast_subscribers bigint,
                    broadcast_requests bigint,
                    broadcast_outcome text,
                    broadcast_reason text,
                    broadcast_priority bigint
                )
                """,
                // Start-up reads one app's unfinished waves; reports are listed per app newest first.
                "CREATE INDEX waves_unfinished ON waves (app_id, id) WHERE completed_at IS NULL",
                "CREATE INDEX waves_complete ON waves (app_id, id) WHERE completed_at IS NOT NULL",
                // The last checkpoint of each (wave, shard), replaced in place while the wave runs, deleted when it
                // completes. `data` is the engine's own encoding.
                """
                CREATE TABLE wave_checkpoints (
                    wave_id bigint NOT NULL REFERENCES waves (id) ON DELETE CASCADE,
                    shard bigint NOT NULL,
                    data bytea NOT NULL,
                    saved_at bigint NOT NULL,
                    PRIMARY KEY (wave_id, shard)
                )
                """,
                // Latest state wins: the newest timestamp published per channel, only ever raised.
                """
                CREATE TABLE channel_latest (
                    app_id bigint NOT NULL REFERENCES apps (id),
                    channel text NOT NULL,
                    timestamp bigint NOT NULL,
                    PRIMARY KEY (app_id, channel)
                )
                """,
                """
                CREATE TABLE pending_retirements (
                    app_id bigint NOT NULL REFERENCES apps (id),
                    channel text NOT NULL,
                    due_at bigint NOT NULL,
                    PRIMARY KEY (app_id, channel)
                )
                """,
                // The highest id of the waves pruning deleted (one row), so ids are never reused once their reports
                // are gone (SQLite's AUTOINCREMENT sequence). Written only when pruning, so publishes do not contend.
                """
                CREATE TABLE pruned_wave_ids (
                    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                    highest bigint NOT NULL
                )
                """,
            ]),
        Migration(
            version: 3, name: "idempotency keys",
            statements: [
                // Answers to API requests that carried an Idempotency-Key (`fanfare serve`), as SQLite's
                // "v2: idempotency_keys": one row per (scope, key), expiring by age.
                """
                CREATE TABLE idempotency_keys (
                    scope text NOT NULL,
                    key text NOT NULL,
                    fingerprint bytea NOT NULL,
                    status integer NOT NULL,
                    headers text NOT NULL,
                    body bytea NOT NULL,
                    created_at bigint NOT NULL,
                    PRIMARY KEY (scope, key)
                )
                """,
                "CREATE INDEX idempotency_keys_by_created_at ON idempotency_keys (created_at)",
            ]),
        clusterMigration,
        Migration(
            version: 5, name: "tokens without a foreign key to apps",
            statements: [
                // The key cost a lookup in `apps` per registered row (a third of a bulk registration's time). Every
                // app id a token gets comes from the upsert into `apps` in the same transaction, and apps are never
                // deleted, so it checked nothing.
                "ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_app_id_fkey"
            ]),
        Migration(
            version: 6, name: "cluster nodes' change-feed positions",
            statements: [
                // How far each node has read the registry's change feed (sent with its heartbeat): pruning keeps what a
                // live node has not read yet.
                "ALTER TABLE cluster_nodes ADD COLUMN feed_position bigint"
            ]),
        changeFeedShardsMigration,
        nodeIncarnationsMigration,
        ledgerMigration,
        waveRegistryPositionMigration,
        Migration(
            version: 11, name: "publications",
            statements: [
                // One publish on an app sending in both environments is a wave per environment; the API names them
                // by the first one's id. A part's row goes when its wave is pruned.
                """
                CREATE TABLE IF NOT EXISTS publication_parts (
                    wave_id bigint PRIMARY KEY,
                    publication_id bigint NOT NULL,
                    part integer NOT NULL
                )
                """,
                "CREATE INDEX IF NOT EXISTS publication_parts_by_publication ON publication_parts(publication_id)",
            ]),
    ]

    static var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Brings the database to `latestVersion`; refuses a database a newer Fanfare wrote.
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS schema_version (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            var current = 0
            for try await version in try await connection.query(
                "SELECT coalesce(max(version), 0)::bigint FROM schema_version", logger: logger
            ).decode(Int64.self) {
                current = Int(version)
            }
            guard current <= latestVersion else {
                throw PostgresStoreError(
                    "the database is at schema version \(current), written by a newer Fanfare (this one knows "
                        + "\(latestVersion)); refusing to use it")
            }
            for migration in migrations where migration.version > current {
                for statement in migration.statements {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO schema_version (version, name) VALUES (\(migration.version), \(migration.name))",
                    logger: logger)
            }
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }
}

/// A failure of ours (not the server's) while talking to PostgreSQL.
struct PostgresStoreError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

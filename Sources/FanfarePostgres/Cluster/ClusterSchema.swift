/// Migration 4: what several nodes coordinate through (docs/deployment.md). Shard leases with epochs, the nodes
/// seen lately, and the registry's change feed, which triggers write in the same transaction as the change.
extension PostgresSchema {
    /// `pg_advisory_xact_lock(space, 2)`: token changes commit one transaction at a time from the moment they
    /// are logged, so their sequence numbers become visible in order and a reader never skips one.
    static let changeLockSpace: Int32 = 0x4641_4E46  // "FANF": the publish lock's space, whose keys are app ids (≥ 1)
    static let changeLockKey: Int32 = -2

    static let clusterMigration = Migration(
        version: 4, name: "cluster: shard leases, nodes, token change feed",
        statements: [
            // The shard count is fixed when the first node starts: every token's shard depends on it.
            """
            CREATE TABLE cluster_config (
                singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                shard_count integer NOT NULL CHECK (shard_count > 0)
            )
            """,
            // One row per shard. A lease is held until `expires_at` (the database's clock); each new holder raises
            // the epoch, which fences the checkpoints of any earlier holder.
            """
            CREATE TABLE shard_leases (
                shard integer PRIMARY KEY,
                node text,
                epoch bigint NOT NULL DEFAULT 0,
                expires_at timestamptz NOT NULL DEFAULT '-infinity'
            )
            """,
            """
            CREATE TABLE cluster_nodes (
                node text PRIMARY KEY,
                started_at timestamptz NOT NULL,
                seen_at timestamptz NOT NULL
            )
            """,
            // The engine's shard hash of each token (`DeviceToken.shardHash`, as a signed bit pattern), so a node
            // loads the shards it takes without reading every token. Rows from before have none.
            "ALTER TABLE tokens ADD COLUMN shard_hash bigint",
            // What changed in `tokens`, in commit order: nodes keep their in-memory shards current from it.
            "CREATE SEQUENCE token_change_seq",
            """
            CREATE TABLE token_changes (
                seq bigint PRIMARY KEY,
                app_id bigint NOT NULL,
                token bytea NOT NULL,
                removed boolean NOT NULL,
                logged_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX token_changes_by_time ON token_changes (logged_at)",
            """
            CREATE FUNCTION fanfare_log_token_changes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_xact_lock(\(changeLockSpace), \(changeLockKey));
                IF TG_OP = 'DELETE' THEN
                    INSERT INTO token_changes (seq, app_id, token, removed)
                    SELECT nextval('token_change_seq'), app_id, token, true FROM old_rows;
                ELSE
                    INSERT INTO token_changes (seq, app_id, token, removed)
                    SELECT nextval('token_change_seq'), app_id, token, false FROM new_rows;
                END IF;
                PERFORM pg_notify('fanfare_tokens', '');
                RETURN NULL;
            END
            $$
            """,
            """
            CREATE TRIGGER tokens_inserted AFTER INSERT ON tokens REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION fanfare_log_token_changes()
            """,
            """
            CREATE TRIGGER tokens_updated AFTER UPDATE ON tokens REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION fanfare_log_token_changes()
            """,
            """
            CREATE TRIGGER tokens_deleted AFTER DELETE ON tokens REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION fanfare_log_token_changes()
            """,
        ])

    /// Migration 7: each change-feed row carries its token's shard hash, so a node reads (and the database joins and
    /// sends) only the changes of the shards it holds, not every node every change.
    static let changeFeedShardsMigration = Migration(
        version: 7, name: "change feed by shard",
        statements: [
            "ALTER TABLE token_changes ADD COLUMN shard_hash bigint",
            """
            CREATE OR REPLACE FUNCTION fanfare_log_token_changes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_advisory_xact_lock(\(changeLockSpace), \(changeLockKey));
                IF TG_OP = 'DELETE' THEN
                    INSERT INTO token_changes (seq, app_id, token, removed, shard_hash)
                    SELECT nextval('token_change_seq'), app_id, token, true, shard_hash FROM old_rows;
                ELSE
                    INSERT INTO token_changes (seq, app_id, token, removed, shard_hash)
                    SELECT nextval('token_change_seq'), app_id, token, false, shard_hash FROM new_rows;
                END IF;
                PERFORM pg_notify('fanfare_tokens', '');
                RETURN NULL;
            END
            $$
            """,
        ])

    /// Migration 8: the run of each node (`NodeIncarnation`, new at every start), written by its heartbeat. Its
    /// sessions carry it in `application_name`, so a live node ends the sessions of a run whose heartbeat is
    /// older than a lease (a stalled node's locks go), and of no other.
    static let nodeIncarnationsMigration = Migration(
        version: 8, name: "cluster nodes' incarnations",
        statements: [
            "ALTER TABLE cluster_nodes ADD COLUMN incarnation text"
        ])

    /// Migration 10: each shared wave's registry position (`WaveRecord.registryPosition`): a node starts a wave on
    /// its shards once its change feed is past it, so a registration another node acknowledged before the publish
    /// is in the wave. Waves from before have none (started at once, as then).
    static let waveRegistryPositionMigration = Migration(
        version: 10, name: "waves' registry positions",
        statements: [
            "ALTER TABLE waves ADD COLUMN registry_position bigint"
        ])
}

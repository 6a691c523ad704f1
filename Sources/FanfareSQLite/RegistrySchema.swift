import FanfareStorage
import GRDB

/// The registry's tables, as versioned GRDB migrations. Add a new migration for every change; never edit one
/// that has shipped (GRDB records applied migrations in `grdb_migrations`).
enum RegistrySchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: apps, channels, tokens, token_channels") { db in
            // One row per (bundle id, environment). Tokens refer to it by a small integer instead of repeating
            // the bundle id string in every row: smaller rows, and one integer compare to filter by app.
            try db.execute(
                sql: """
                    CREATE TABLE apps (
                        id INTEGER PRIMARY KEY,
                        bundle_id TEXT NOT NULL,
                        environment INTEGER NOT NULL,
                        UNIQUE (bundle_id, environment)
                    )
                    """)
            try db.execute(sql: "CREATE TABLE channels (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")

            // Rows get a sequential integer id, so new registrations append to the end of the table and of the
            // membership tables. There is deliberately no index on `token`: random 80-byte keys made every
            // registration a random B-tree insert, and the WAL traffic that caused capped registration at ~50k/s
            // for a million tokens. The store finds rows through an in-memory map instead (TokenIndex), rebuilt
            // from this table at open, and locks the file so no other process can change it underneath.
            // No index on app_id: a deployment usually serves one app, and loading it at start-up is a full scan
            // either way.
            try db.execute(
                sql: """
                    CREATE TABLE tokens (
                        id INTEGER PRIMARY KEY,
                        token BLOB NOT NULL,
                        kind INTEGER NOT NULL,
                        activity_id TEXT,
                        device_id TEXT,
                        attributes_type TEXT,
                        app_id INTEGER NOT NULL,
                        frequent INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        last_seen_at INTEGER NOT NULL
                    )
                    """)
            // Age retirement deletes update tokens by creation time (appended in time order too).
            try db.execute(sql: "CREATE INDEX tokens_by_kind_created_at ON tokens(kind, created_at)")

            // Channel membership, keyed by token id first: a token's channels are contiguous and in the same
            // order as the tokens, so start-up loading walks both tables side by side. The index on channel_id
            // serves retirement by channel.
            try db.execute(
                sql: """
                    CREATE TABLE token_channels (
                        token_id INTEGER NOT NULL,
                        channel_id INTEGER NOT NULL,
                        PRIMARY KEY (token_id, channel_id)
                    ) WITHOUT ROWID
                    """)
            try db.execute(sql: "CREATE INDEX token_channels_by_channel ON token_channels(channel_id)")
            // No FOREIGN KEY clauses: enforcing them looked up the parent rows on every membership insert (about
            // a tenth of the registration cost); the registry's own code is the only writer. Deleting a token
            // deletes its memberships through this trigger instead of ON DELETE CASCADE.
            try db.execute(
                sql: """
                    CREATE TRIGGER tokens_delete_memberships AFTER DELETE ON tokens BEGIN
                        DELETE FROM token_channels WHERE token_id = OLD.id;
                    END
                    """)
        }
        migrator.registerMigration("v2: idempotency_keys") { db in
            // Answers to API requests that carried an Idempotency-Key (`fanfare serve`), kept next to the tokens
            // so a restarted service still recognises a retry. One row per (scope, key); `scope` tells callers
            // apart (an API key's fingerprint), `fingerprint` is a hash of the request the answer belongs to.
            // Rows expire by age (`created_at`, UNIX ms), hence the index.
            try db.execute(
                sql: """
                    CREATE TABLE idempotency_keys (
                        scope TEXT NOT NULL,
                        key TEXT NOT NULL,
                        fingerprint BLOB NOT NULL,
                        status INTEGER NOT NULL,
                        headers TEXT NOT NULL,
                        body BLOB NOT NULL,
                        created_at INTEGER NOT NULL,
                        PRIMARY KEY (scope, key)
                    ) WITHOUT ROWID
                    """)
            try db.execute(sql: "CREATE INDEX idempotency_keys_by_created_at ON idempotency_keys(created_at)")
        }
        migrator.registerMigration("v3: waves") { db in
            // Durable waves (WaveStore, docs/fanout.md "Durable waves: storage"). One row per published wave,
            // written before `publish` returns; `completed_at` stays NULL until the wave's final report is
            // written into the same row. AUTOINCREMENT (ids are given by the engine, not assigned here) makes
            // SQLite remember the highest id ever inserted in `sqlite_sequence`, so pruning the newest reports
            // cannot make a restarted engine reuse their ids. The app is the `apps` row tokens use.
            try db.execute(
                sql: """
                    CREATE TABLE waves (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        app_id INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        event TEXT NOT NULL,
                        timestamp INTEGER NOT NULL,
                        priority TEXT NOT NULL,
                        has_alert INTEGER NOT NULL,
                        payload BLOB NOT NULL,
                        fresh_until INTEGER,
                        collapse_id TEXT,
                        dismissal_date INTEGER,
                        published_at INTEGER NOT NULL,
                        shard_count INTEGER NOT NULL,
                        start_keys BLOB NOT NULL,
                        completed_at INTEGER,
                        targeted INTEGER NOT NULL DEFAULT 0,
                        sent INTEGER NOT NULL DEFAULT 0,
                        delivered INTEGER NOT NULL DEFAULT 0,
                        failed INTEGER NOT NULL DEFAULT 0,
                        superseded INTEGER NOT NULL DEFAULT 0,
                        downgraded INTEGER NOT NULL DEFAULT 0,
                        expired INTEGER NOT NULL DEFAULT 0,
                        invalidated INTEGER NOT NULL DEFAULT 0,
                        retried INTEGER NOT NULL DEFAULT 0,
                        possible_duplicates INTEGER NOT NULL DEFAULT 0,
                        resent_after_restart INTEGER NOT NULL DEFAULT 0,
                        restarts INTEGER NOT NULL DEFAULT 0,
                        failed_by_reason TEXT NOT NULL DEFAULT '',
                        time_to_first_ack INTEGER,
                        makespan INTEGER
                    )
                    """)
            // Start-up reads one app's unfinished waves; reports are listed per app newest first. Partial
            // indexes: each holds only the rows its query wants.
            try db.execute(sql: "CREATE INDEX waves_unfinished ON waves(app_id, id) WHERE completed_at IS NULL")
            try db.execute(sql: "CREATE INDEX waves_complete ON waves(app_id, id) WHERE completed_at IS NOT NULL")
            // The last checkpoint of each (wave, shard): replaced in place every ~100 ms while the wave runs,
            // deleted when it completes. `data` is the engine's own encoding, up to tens of KiB. A rowid table,
            // not WITHOUT ROWID: there a row is its own B-tree key, and a page split copies a whole row (overflow
            // pages included) into the parent; here parents hold rowids and the key index holds two integers.
            try db.execute(
                sql: """
                    CREATE TABLE wave_checkpoints (
                        wave_id INTEGER NOT NULL,
                        shard INTEGER NOT NULL,
                        data BLOB NOT NULL,
                        saved_at INTEGER NOT NULL,
                        PRIMARY KEY (wave_id, shard)
                    )
                    """)
            // The newest update timestamp published per channel, so latest-state-wins holds across restarts.
            // By name, not by `channels.id`: that row goes when no token follows the channel any more.
            try db.execute(
                sql: """
                    CREATE TABLE channel_latest (
                        app_id INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        timestamp INTEGER NOT NULL,
                        PRIMARY KEY (app_id, channel)
                    ) WITHOUT ROWID
                    """)
            // Channels whose update tokens retire at `due_at` (UNIX s: an `end`'s dismissal date), until applied.
            try db.execute(
                sql: """
                    CREATE TABLE pending_retirements (
                        app_id INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        due_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, channel)
                    ) WITHOUT ROWID
                    """)
        }
        migrator.registerMigration("v4: broadcast subscriptions, token ledger, broadcast links") { db in
            // Push-to-start tokens of iOS 18+ devices: a start may carry `input-push-channel`.
            try db.execute(sql: "ALTER TABLE tokens ADD COLUMN supports_broadcast INTEGER NOT NULL DEFAULT 0")
            // The replacement rule (a new push-to-start token replaces the old one of the same device and
            // attributes type) and the ledger's links (an update token -> the push-to-start token that started it,
            // and back) look tokens up by device. Partial: only rows that name a device pay for the index.
            try db.execute(
                sql: """
                    CREATE INDEX tokens_by_device ON tokens(app_id, device_id, attributes_type)
                    WHERE device_id IS NOT NULL
                    """)
            // One activity, one path: registering a broadcast subscription removes the update tokens of its
            // activity. Update tokens only (push-to-start rows have no activity id).
            try db.execute(
                sql: """
                    CREATE INDEX tokens_by_activity ON tokens(app_id, activity_id) WHERE kind =
                        \(TokenKind.update.rawValue)
                    """)

            // Activities started with a broadcast channel: no update token, APNs fans the channel out to them.
            try db.execute(
                sql: """
                    CREATE TABLE broadcast_subscriptions (
                        app_id INTEGER NOT NULL,
                        activity_id TEXT NOT NULL,
                        device_id TEXT,
                        attributes_type TEXT,
                        frequent INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        last_seen_at INTEGER NOT NULL,
                        PRIMARY KEY (app_id, activity_id)
                    ) WITHOUT ROWID
                    """)
            try db.execute(
                sql: """
                    CREATE INDEX broadcast_subscriptions_by_device ON broadcast_subscriptions(app_id, device_id,
                        attributes_type)
                    WHERE device_id IS NOT NULL
                    """)
            try db.execute(
                sql: "CREATE INDEX broadcast_subscriptions_by_created_at ON broadcast_subscriptions(created_at)")
            // The Fanfare channels a subscription follows, by channel first: counts per channel and retirement by
            // channel read one range. By name (like channel_latest), not `channels.id`.
            try db.execute(
                sql: """
                    CREATE TABLE subscription_channels (
                        app_id INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        activity_id TEXT NOT NULL,
                        PRIMARY KEY (channel, app_id, activity_id)
                    ) WITHOUT ROWID
                    """)
            try db.execute(
                sql: """
                    CREATE INDEX subscription_channels_by_activity ON subscription_channels(app_id, activity_id)
                    """)

            // The ledger's history: one row per registration that ended (replaced, retired, invalidated,
            // unregistered), with what it was. Written only when a registration ends, so registering stays an
            // append; a live registration is its own "registered" record. Pruned by `at` (ledger retention).
            try db.execute(
                sql: """
                    CREATE TABLE token_history (
                        id INTEGER PRIMARY KEY,
                        app_id INTEGER NOT NULL,
                        token BLOB,
                        kind INTEGER NOT NULL,
                        activity_id TEXT,
                        device_id TEXT,
                        attributes_type TEXT,
                        registered_at INTEGER NOT NULL,
                        event INTEGER NOT NULL,
                        at INTEGER NOT NULL,
                        channel TEXT,
                        reason TEXT,
                        invalid_since INTEGER,
                        replaced_by BLOB
                    )
                    """)
            try db.execute(sql: "CREATE INDEX token_history_by_token ON token_history(token) WHERE token IS NOT NULL")
            try db.execute(
                sql: """
                    CREATE INDEX token_history_by_activity ON token_history(app_id, activity_id) WHERE activity_id IS
                        NOT NULL
                    """)
            try db.execute(sql: "CREATE INDEX token_history_by_at ON token_history(at)")

            // Fanfare channel -> APNs broadcast channel (BroadcastLinkStore).
            try db.execute(
                sql: """
                    CREATE TABLE broadcast_links (
                        app_id INTEGER NOT NULL,
                        channel TEXT NOT NULL,
                        channel_id TEXT NOT NULL,
                        storage_policy INTEGER NOT NULL,
                        created_by_us INTEGER NOT NULL,
                        created_at INTEGER NOT NULL,
                        delete_after INTEGER,
                        PRIMARY KEY (app_id, channel)
                    ) WITHOUT ROWID
                    """)

            // Waves with a broadcast part: the APNs channel published on, the start body for broadcast-capable
            // push-to-start tokens, and the report of the broadcast part (NULL without one).
            for column in [
                "broadcast_channel_id TEXT", "channel_payload BLOB", "report_broadcast_channel_id TEXT",
                "broadcast_subscribers INTEGER", "broadcast_requests INTEGER", "broadcast_outcome TEXT",
                "broadcast_reason TEXT", "broadcast_priority INTEGER",
            ] {
                try db.execute(sql: "ALTER TABLE waves ADD COLUMN \(column)")
            }
        }
        migrator.registerMigration("v5: broadcast report flags") { db in
            // `BroadcastPartRecord.flags` (downgraded, resent after a restart), so a stored report keeps them.
            try db.execute(sql: "ALTER TABLE waves ADD COLUMN broadcast_flags INTEGER")
        }
        migrator.registerMigration("v6: publications") { db in
            // One publish on an app sending in both environments is a wave per environment; the API names them
            // by the first one's id. A part's row goes when its wave is pruned.
            try db.execute(
                sql: """
                    CREATE TABLE publication_parts (
                        wave_id INTEGER PRIMARY KEY,
                        publication_id INTEGER NOT NULL,
                        part INTEGER NOT NULL
                    )
                    """)
            try db.execute(sql: "CREATE INDEX publication_parts_by_publication ON publication_parts(publication_id)")
        }
        return migrator
    }
}

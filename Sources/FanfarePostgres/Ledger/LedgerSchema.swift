/// Migration 9: broadcast subscriptions, the token ledger's history and broadcast links, as SQLite's "v4" (the
/// same rules, docs/fanout.md "Registry").
extension PostgresSchema {
    static let ledgerMigration = Migration(
        version: 9, name: "broadcast subscriptions, token ledger, broadcast links",
        statements: [
            // Activities started with a broadcast channel: no update token, APNs fans the channel out to them.
            """
            CREATE TABLE broadcast_subscriptions (
                app_id bigint NOT NULL,
                activity_id text NOT NULL,
                device_id text,
                attributes_type text,
                frequent boolean NOT NULL,
                created_at bigint NOT NULL,
                last_seen_at bigint NOT NULL,
                PRIMARY KEY (app_id, activity_id)
            )
            """,
            """
            CREATE INDEX broadcast_subscriptions_by_device ON broadcast_subscriptions (app_id, device_id,
                attributes_type) WHERE device_id IS NOT NULL
            """,
            "CREATE INDEX broadcast_subscriptions_by_created_at ON broadcast_subscriptions (created_at)",
            // The channels a subscription follows, channel first: a channel's count (read at every publish on a
            // linked channel) and its retirement read one index range.
            """
            CREATE TABLE subscription_channels (
                app_id bigint NOT NULL,
                channel text NOT NULL,
                activity_id text NOT NULL,
                PRIMARY KEY (app_id, channel, activity_id)
            )
            """,
            "CREATE INDEX subscription_channels_by_activity ON subscription_channels (app_id, activity_id)",
            "CREATE INDEX subscription_channels_by_channel ON subscription_channels (channel)",
            // Registrations that ended (replaced, retired, invalidated, unregistered), with what they were;
            // pruned by `at` (the ledger's retention). A live registration is its own "registered" record.
            """
            CREATE TABLE token_history (
                id bigserial PRIMARY KEY,
                app_id bigint NOT NULL,
                token bytea,
                kind smallint NOT NULL,
                activity_id text,
                device_id text,
                attributes_type text,
                registered_at bigint NOT NULL,
                event smallint NOT NULL,
                at bigint NOT NULL,
                channel text,
                reason text,
                invalid_since bigint,
                replaced_by bytea
            )
            """,
            "CREATE INDEX token_history_by_token ON token_history (token) WHERE token IS NOT NULL",
            """
            CREATE INDEX token_history_by_activity ON token_history (app_id, activity_id)
                WHERE activity_id IS NOT NULL
            """,
            "CREATE INDEX token_history_by_at ON token_history (at)",
            // The ledger links an update token to the push-to-start token of its device and back.
            """
            CREATE INDEX tokens_by_device ON tokens (app_id, device_id, attributes_type) WHERE device_id IS NOT NULL
            """,
            // One activity, one path: a subscription removes the update tokens of its activity.
            "CREATE INDEX tokens_by_activity ON tokens (app_id, activity_id) WHERE kind = 0",
            // Fanfare channel -> APNs broadcast channel (BroadcastLinkStore). `deletion_claimed_by`/`_until`: the
            // node deleting the APNs channel after the match, so that one node does it.
            """
            CREATE TABLE broadcast_links (
                app_id bigint NOT NULL,
                channel text NOT NULL,
                channel_id text NOT NULL,
                storage_policy smallint NOT NULL,
                created_by_us boolean NOT NULL,
                created_at bigint NOT NULL,
                delete_after bigint,
                deletion_claimed_by text,
                deletion_claimed_until timestamptz,
                PRIMARY KEY (app_id, channel)
            )
            """,
            // A shared wave's broadcast audience as the publishing node counted it (every node reports it).
            "ALTER TABLE waves ADD COLUMN published_subscribers bigint",
            // The broadcast part's report flags (`BroadcastPartRecord.flags`: downgraded, resent after a restart).
            "ALTER TABLE waves ADD COLUMN broadcast_flags bigint",
            // A node that lost a lease takes no shard until it restarts: the others count it out of the fair share.
            "ALTER TABLE cluster_nodes ADD COLUMN accepting boolean NOT NULL DEFAULT true",
        ])
}

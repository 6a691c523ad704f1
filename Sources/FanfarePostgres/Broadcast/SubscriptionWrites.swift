import FanfareCore
import FanfareStorage
import Logging
import NIOCore
import PostgresNIO

/// `register`'s broadcast-subscription half (docs/fanout.md, "Registry"), inside the batch's transaction after
/// its tokens are written: an update token replaces the subscription of its activity; a subscription replaces the
/// update tokens of its activity and is written with its channels. Every ending gets its history row.
enum SubscriptionWrites {
    /// The rule for the batch's update tokens (in `incoming`): the subscriptions of their activities go.
    static func replaceSubscriptionsOfUpdateTokens(
        now: Int64, result: inout RegistrationResult, on connection: PostgresConnection, logger: Logger
    ) async throws {
        // Most registries have no subscription at all: then the batch is not joined against them.
        var any = false
        for try await exists in try await connection.query(
            "SELECT EXISTS (SELECT 1 FROM broadcast_subscriptions)", logger: logger
        ).decode(Bool.self) { any = exists }
        guard any else { return }
        let query = LedgerHistorySQL.deletingSubscriptions(
            """
            DELETE FROM broadcast_subscriptions s USING incoming i
            WHERE i.kind = \(TokenKind.update.rawValue) AND s.app_id = i.app_id AND s.activity_id = i.activity_id
            """, binds: PostgresBindings(), ending: .init(event: .replaced, at: now), replacedBy: "i.token")
        result.replacedSubscriptions += try await LedgerHistorySQL.deletedSubscriptions(
            query, deltas: &result.subscriptionDeltas, on: connection, logger: logger
        ).sorted()
    }

    /// The subscriptions, after the tokens: each replaces the update tokens of its activity, then is inserted or
    /// updated (`created_at` kept, `last_seen_at` only forward) with its channels as given.
    static func write(
        _ subscriptions: [BroadcastSubscription], appIDs: [PostgresTokenStore.AppKey: Int64], now: Int64,
        result: inout RegistrationResult, on connection: PostgresConnection, logger: Logger
    ) async throws {
        guard !subscriptions.isEmpty else { return }
        try await connection.query(
            """
            CREATE TEMPORARY TABLE IF NOT EXISTS incoming_subscriptions (
                ordinal integer NOT NULL, app_id bigint NOT NULL, activity_id text NOT NULL, device_id text,
                attributes_type text, frequent boolean NOT NULL, channels text[] NOT NULL, created_at bigint NOT NULL,
                last_seen_at bigint NOT NULL
            ) ON COMMIT DELETE ROWS
            """, logger: logger)
        try await connection.copyFrom(
            table: "incoming_subscriptions",
            columns: [
                "ordinal", "app_id", "activity_id", "device_id", "attributes_type", "frequent", "channels",
                "created_at", "last_seen_at",
            ], logger: logger
        ) { writer in
            var buffer = ByteBuffer()
            for (ordinal, subscription) in subscriptions.enumerated() {
                let key = PostgresTokenStore.AppKey(
                    bundleID: subscription.bundleID, environment: subscription.environment)
                CopyText.write(subscription, ordinal: ordinal, appID: appIDs[key] ?? 0, to: &buffer)
                if (ordinal + 1) % PostgresTokenStore.copyChunkRows == 0 {
                    try await writer.write(buffer)
                    buffer.clear()
                }
            }
            if buffer.readableBytes > 0 { try await writer.write(buffer) }
        }
        // One path per activity: its update tokens go (earlier tokens of this batch included).
        result.replacedTokens += try await LedgerHistorySQL.deletedTokens(
            LedgerHistorySQL.deletingTokens(
                """
                DELETE FROM tokens t USING incoming_subscriptions i
                WHERE t.kind = \(TokenKind.update.rawValue) AND t.app_id = i.app_id AND t.activity_id = i.activity_id
                """, binds: PostgresBindings(), ending: .init(event: .replaced, at: now)),
            on: connection, logger: logger)
        try await writeRows(result: &result, on: connection, logger: logger)
    }

    /// `incoming_subscriptions` into the tables: the last of each activity in the batch wins (with the first
    /// one's creation time, as if written one by one); channel counts move by what changed.
    private static func writeRows(
        result: inout RegistrationResult, on connection: PostgresConnection, logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO broadcast_subscriptions (app_id, activity_id, device_id, attributes_type, frequent, created_at,
                                                 last_seen_at)
            SELECT DISTINCT ON (app_id, activity_id) app_id, activity_id, device_id, attributes_type, frequent,
                   last_value(created_at) OVER batch, max(last_seen_at) OVER batch
            FROM incoming_subscriptions
            WINDOW batch AS (PARTITION BY app_id, activity_id ORDER BY ordinal DESC
                             ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
            ORDER BY app_id, activity_id, ordinal DESC
            ON CONFLICT (app_id, activity_id) DO UPDATE SET
                device_id = EXCLUDED.device_id, attributes_type = EXCLUDED.attributes_type,
                frequent = EXCLUDED.frequent,
                last_seen_at = greatest(broadcast_subscriptions.last_seen_at, EXCLUDED.last_seen_at)
            """, logger: logger)
        // Channels: what each activity follows now (its last entry in the batch) against what it followed.
        let rows = try await connection.query(
            """
            WITH latest AS (
                SELECT DISTINCT ON (app_id, activity_id) app_id, activity_id, channels
                FROM incoming_subscriptions ORDER BY app_id, activity_id, ordinal DESC
            ), wanted AS (
                SELECT DISTINCT l.app_id, c.channel, l.activity_id FROM latest l, unnest(l.channels) AS c(channel)
            ), dropped AS (
                DELETE FROM subscription_channels m USING latest l
                WHERE m.app_id = l.app_id AND m.activity_id = l.activity_id
                  AND NOT EXISTS (SELECT 1 FROM wanted w WHERE w.app_id = m.app_id AND w.channel = m.channel
                                  AND w.activity_id = m.activity_id)
                RETURNING m.channel
            ), added AS (
                INSERT INTO subscription_channels (app_id, channel, activity_id)
                SELECT app_id, channel, activity_id FROM wanted
                ON CONFLICT DO NOTHING
                RETURNING channel
            )
            SELECT channel, -1 FROM dropped UNION ALL SELECT channel, 1 FROM added
            """, logger: logger)
        for try await (channel, change) in rows.decode((String, Int32).self) {
            result.subscriptionDeltas[channel, default: 0] += Int(change)
        }
        result.subscriptionDeltas = result.subscriptionDeltas.filter { $0.value != 0 }
    }
}

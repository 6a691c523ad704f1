import FanfareCore
import FanfareStorage
import Logging
import NIOCore
import PostgresNIO

/// How registrations that end get their ledger history row (`token_history`): in the statement that deletes them,
/// so no ending goes unrecorded and no row is written for a deletion that did not happen.
enum LedgerHistorySQL {
    /// What an ending records beyond the registration itself.
    struct Ending: Sendable {
        var event: TokenLedgerEvent.Kind
        /// UNIX ms.
        var at: Int64
        var channel: String?
        var reason: String?
        var invalidSince: Int64?
    }

    /// `delete` (a `DELETE FROM tokens t ...` with its binds `$1...$n`, no RETURNING) as one statement that also
    /// writes a history row per deleted token and returns each deleted token, followed by `extraColumns` (more
    /// RETURNING expressions; `replacedBy`, when given, names one of them: the token that replaced the row).
    static func deletingTokens(
        _ delete: String, binds: PostgresBindings, ending: Ending, extraColumns: [String] = [],
        replacedBy: String? = nil
    ) -> PostgresQuery {
        var binds = binds
        let first = binds.count + 1
        binds.append(Int16(ending.event.rawValue))
        binds.append(ending.at)
        binds.append(ending.channel)
        binds.append(ending.reason)
        binds.append(ending.invalidSince)
        let extra = extraColumns.enumerated().map { ", \($1) AS extra\($0)" }.joined()
        let extraNames = extraColumns.indices.map { ", extra\($0)" }.joined()
        let replacedByColumn =
            replacedBy.map { name in
                "extra\(extraColumns.firstIndex(of: name) ?? 0)"
            } ?? "NULL::bytea"
        let sql = """
            WITH ended AS (
                \(delete)
                RETURNING t.app_id, t.token, t.kind, t.activity_id, t.device_id, t.attributes_type, t.created_at\(extra)
            ), logged AS (
                INSERT INTO token_history (app_id, token, kind, activity_id, device_id, attributes_type, registered_at,
                                           event, at, channel, reason, invalid_since, replaced_by)
                SELECT app_id, token, kind, activity_id, device_id, attributes_type, created_at, $\(first)::smallint,
                       $\(first + 1)::bigint, $\(first + 2)::text, $\(first + 3)::text, $\(first + 4)::bigint,
                       \(replacedByColumn)
                FROM ended
            )
            SELECT token\(extraNames) FROM ended
            """
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }

    /// Runs a `deletingTokens` query that has no extra columns; returns the tokens it deleted.
    static func deletedTokens(
        _ query: PostgresQuery, on connection: PostgresConnection, logger: Logger
    ) async throws -> [DeviceToken] {
        var tokens: [DeviceToken] = []
        for try await bytes in try await connection.query(query, logger: logger).decode(ByteBuffer.self) {
            tokens.append(try PostgresTokenStore.token(bytes))
        }
        return tokens
    }

    /// `delete` (a `DELETE FROM broadcast_subscriptions s ...` with its binds `$1...$n`, no RETURNING) as one
    /// statement that also deletes the subscriptions' channels and writes their history rows. `replacedBy`: an
    /// expression the DELETE can return (the update token that replaced the subscription), else none.
    static func deletingSubscriptions(
        _ delete: String, binds: PostgresBindings, ending: Ending, replacedBy: String? = nil
    ) -> PostgresQuery {
        var binds = binds
        let first = binds.count + 1
        binds.append(Int16(ending.event.rawValue))
        binds.append(ending.at)
        binds.append(ending.channel)
        let kind = LedgerRegistrationKind.broadcastSubscription.rawValue
        let sql = """
            WITH ended AS (
                \(delete)
                RETURNING s.app_id, s.activity_id, s.device_id, s.attributes_type, s.created_at,
                          \(replacedBy ?? "NULL::bytea") AS replaced_by
            ), gone AS (
                DELETE FROM subscription_channels m USING ended e
                WHERE m.app_id = e.app_id AND m.activity_id = e.activity_id
                RETURNING m.channel
            ), logged AS (
                INSERT INTO token_history (app_id, token, kind, activity_id, device_id, attributes_type, registered_at,
                                           event, at, channel, replaced_by)
                SELECT app_id, NULL, \(kind), activity_id, device_id, attributes_type, created_at, $\(first)::smallint,
                       $\(first + 1)::bigint, $\(first + 2)::text, replaced_by
                FROM ended
            )
            SELECT activity_id, NULL::text FROM ended UNION ALL SELECT NULL, channel FROM gone
            """
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }

    /// Runs a `deletingSubscriptions` query: the activity ids removed (in no particular order), and the change of
    /// each channel's count added to `deltas`.
    static func deletedSubscriptions(
        _ query: PostgresQuery, deltas: inout [String: Int], on connection: PostgresConnection, logger: Logger
    ) async throws -> [String] {
        var activities: [String] = []
        for try await (activity, channel) in try await connection.query(query, logger: logger).decode(
            (String?, String?).self)
        {
            if let activity { activities.append(activity) }
            if let channel { deltas[channel, default: 0] -= 1 }
        }
        deltas = deltas.filter { $0.value != 0 }
        return activities
    }
}

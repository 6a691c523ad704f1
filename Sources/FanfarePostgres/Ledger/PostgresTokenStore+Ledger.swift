import FanfareCore
import FanfareStorage
import Logging
import NIOCore
import PostgresNIO

/// The token ledger (docs/fanout.md, "Registry: the ledger") and the subscription reads and removals, with
/// SQLiteTokenStore's semantics. Reads run in one snapshot.
extension PostgresTokenStore: SubscriptionLedgerStore {
    public func ledger(
        token: DeviceToken, bundleID: String, environment: APNsEnvironment, activityLifetime: Duration
    )
        throws(RegistryError) -> TokenLedgerEntry?
    {
        let lifetime = LedgerRetention.milliseconds(activityLifetime)
        let key = Self.bytes(token)
        return try inTransaction("reading the ledger of token \(token.hexString)", begin: Self.beginSnapshotRead) {
            connection, logger in
            guard let appID = try await Self.existingAppID(bundleID, environment, connection, logger) else {
                return nil
            }
            var entry = TokenLedgerEntry(token: token, bundleID: bundleID, environment: environment)
            for try await row in try await connection.query(
                """
                SELECT token, kind, activity_id, device_id, attributes_type, frequent, supports_broadcast, channels,
                       created_at, last_seen_at
                FROM tokens WHERE token = \(key) AND app_id = \(appID)
                """, logger: logger)
            {
                let registration = try Self.registration(row, bundleID: bundleID, environment: environment)
                entry.registration = registration
                entry.history.append(
                    TokenLedgerEvent(
                        kind: .registered, at: registration.createdAt, registrationKind: .init(registration.kind),
                        activityID: registration.activityID))
            }
            if let registration = entry.registration {
                try await Self.addLinks(to: &entry, registration, appID: appID, connection, logger)
                if registration.kind == .update {
                    let (sum, overflow) = registration.createdAt.addingReportingOverflow(lifetime)
                    entry.retiresByLifetimeAt = overflow ? Int64.max : sum
                    for try await (channel, due) in try await connection.query(
                        """
                        SELECT channel, due_at FROM pending_retirements
                        WHERE app_id = \(appID) AND channel = ANY(\(registration.channels))
                        """, logger: logger
                    ).decode((String, Int64).self) { entry.pendingRetirements[channel] = due }
                }
            }
            entry.history += try await Self.history(
                connection.query(
                    """
                    SELECT \(unescaped: Self.historyColumns) FROM token_history
                    WHERE token = \(key) AND app_id = \(appID) ORDER BY id DESC
                    """, logger: logger))
            guard entry.registration != nil || !entry.history.isEmpty else { return nil }
            // Newest first; the sort is stable, so an ending stays before the registration it ended at the same ms.
            entry.history.sort { $0.at > $1.at }
            return entry
        }
    }

    public func ledger(
        activityID: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> ActivityLedgerEntry?
    {
        try inTransaction("reading the ledger of activity \(activityID)", begin: Self.beginSnapshotRead) {
            connection, logger in
            guard let appID = try await Self.existingAppID(bundleID, environment, connection, logger) else {
                return nil
            }
            var entry = ActivityLedgerEntry(activityID: activityID)
            for try await bytes in try await connection.query(
                """
                SELECT token FROM tokens
                WHERE app_id = \(appID) AND activity_id = \(activityID) AND kind = \(Int16(TokenKind.update.rawValue))
                ORDER BY created_at, token
                """, logger: logger
            ).decode(ByteBuffer.self) { entry.updateTokens.append(try Self.token(bytes)) }
            entry.subscription = try await Self.subscription(
                activityID, appID: appID, bundleID, environment, connection, logger)
            entry.history = try await Self.history(
                connection.query(
                    """
                    SELECT \(unescaped: Self.historyColumns) FROM token_history
                    WHERE app_id = \(appID) AND activity_id = \(activityID) ORDER BY id DESC
                    """, logger: logger))
            guard !entry.updateTokens.isEmpty || entry.subscription != nil || !entry.history.isEmpty else {
                return nil
            }
            entry.history.sort { $0.at > $1.at }
            return entry
        }
    }

    public func subscription(
        activityID: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> BroadcastSubscription? {
        try inTransaction("reading broadcast subscription \(activityID)", begin: Self.beginSnapshotRead) {
            connection, logger in
            guard let appID = try await Self.existingAppID(bundleID, environment, connection, logger) else {
                return nil
            }
            return try await Self.subscription(activityID, appID: appID, bundleID, environment, connection, logger)
        }
    }

    public func subscriptionCounts(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> [String: Int] {
        try inTransaction(
            "counting the broadcast subscriptions of \(bundleID) (\(environment))", begin: Self.beginSnapshotRead
        ) { connection, logger in
            var counts: [String: Int] = [:]
            for try await (channel, count) in try await connection.query(
                """
                SELECT m.channel, count(*) FROM subscription_channels m JOIN apps a ON a.id = m.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                GROUP BY m.channel
                """, logger: logger
            ).decode((String, Int64).self) { counts[channel] = Int(count) }
            return counts
        }
    }

    public func subscriptionCount(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> Int {
        try inTransaction("counting the broadcast subscriptions of \(channel)", begin: Self.beginSnapshotRead) {
            connection, logger in
            var count = 0
            for try await value in try await connection.query(
                """
                SELECT count(*) FROM subscription_channels m JOIN apps a ON a.id = m.app_id
                WHERE m.channel = \(channel) AND a.bundle_id = \(bundleID)
                  AND a.environment = \(Int16(environment.rawValue))
                """, logger: logger
            ).decode(Int64.self) { count = Int(value) }
            return count
        }
    }

    public func unregisterSubscriptions(
        activityIDs: [String], bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> RetirementResult {
        guard !activityIDs.isEmpty else { return RetirementResult() }
        let now = clock()
        return try inTransaction("unregistering \(activityIDs.count) broadcast subscriptions") { connection, logger in
            var result = RetirementResult()
            guard let appID = try await Self.existingAppID(bundleID, environment, connection, logger) else {
                return result
            }
            var binds = PostgresBindings()
            binds.append(appID)
            binds.append(activityIDs)
            let query = LedgerHistorySQL.deletingSubscriptions(
                "DELETE FROM broadcast_subscriptions s WHERE s.app_id = $1 AND s.activity_id = ANY($2::text[])",
                binds: binds, ending: .init(event: .unregistered, at: now))
            let removed = Set(
                try await LedgerHistorySQL.deletedSubscriptions(
                    query, deltas: &result.subscriptionDeltas, on: connection, logger: logger))
            // In the order asked for, as SQLite answers.
            result.subscriptions = activityIDs.filter { removed.contains($0) }
            return result
        }
    }

    @discardableResult
    public func pruneLedgerHistory(before: Int64) throws(RegistryError) -> Int {
        try inTransaction("pruning the ledger history") { connection, logger in
            try await connection.query("DELETE FROM token_history WHERE at < \(before)", logger: logger).get()
                .metadata.rows ?? 0
        }
    }

    // MARK: - Helpers

    /// The id of an app's row, or nil if the app never registered anything (reads do not create it).
    static func existingAppID(
        _ bundleID: String, _ environment: APNsEnvironment, _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> Int64? {
        for try await id in try await connection.query(
            "SELECT id FROM apps WHERE bundle_id = \(bundleID) AND environment = \(Int16(environment.rawValue))",
            logger: logger
        ).decode(Int64.self) { return id }
        return nil
    }

    /// Links: an update token -> the push-to-start token of its device and type; a push-to-start token -> the
    /// activities (update tokens, then broadcast subscriptions) of its device and type.
    private static func addLinks(
        to entry: inout TokenLedgerEntry, _ registration: TokenRegistration, appID: Int64,
        _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        guard let deviceID = registration.deviceID, let type = registration.attributesType else { return }
        switch registration.kind {
        case .update:
            for try await bytes in try await connection.query(
                """
                SELECT token FROM tokens
                WHERE app_id = \(appID) AND device_id = \(deviceID) AND attributes_type = \(type)
                  AND kind = \(Int16(TokenKind.pushToStart.rawValue))
                ORDER BY created_at DESC, token LIMIT 1
                """, logger: logger
            ).decode(ByteBuffer.self) { entry.startedBy = try token(bytes) }
        case .pushToStart:
            for try await (bytes, activityID, channels, createdAt) in try await connection.query(
                """
                SELECT token, activity_id, channels, created_at FROM tokens
                WHERE app_id = \(appID) AND device_id = \(deviceID) AND attributes_type = \(type)
                  AND kind = \(Int16(TokenKind.update.rawValue))
                ORDER BY created_at, token
                """, logger: logger
            ).decode((ByteBuffer, String?, [String], Int64).self) {
                entry.activities.append(
                    LedgerActivity(
                        activityID: activityID ?? "", token: try token(bytes), channels: channels.sorted(),
                        createdAt: createdAt))
            }
            for try await (activityID, createdAt, channels) in try await connection.query(
                """
                SELECT s.activity_id, s.created_at,
                       array(SELECT m.channel FROM subscription_channels m
                             WHERE m.app_id = s.app_id AND m.activity_id = s.activity_id ORDER BY m.channel)
                FROM broadcast_subscriptions s
                WHERE s.app_id = \(appID) AND s.device_id = \(deviceID) AND s.attributes_type = \(type)
                ORDER BY s.created_at, s.activity_id
                """, logger: logger
            ).decode((String, Int64, [String]).self) {
                entry.activities.append(
                    LedgerActivity(activityID: activityID, token: nil, channels: channels, createdAt: createdAt))
            }
        }
    }

    /// What `history` reads, in its order.
    private static let historyColumns =
        "kind, activity_id, registered_at, event, at, channel, reason, invalid_since, replaced_by"

    /// History rows (`historyColumns`, newest row first): each gives its ending and the registration it ended.
    private static func history(_ rows: PostgresRowSequence) async throws -> [TokenLedgerEvent] {
        var events: [TokenLedgerEvent] = []
        for try await (kind, activityID, registeredAt, event, at, channel, reason, invalidSince, replacedBy)
            in rows.decode((Int16, String?, Int64, Int16, Int64, String?, String?, Int64?, ByteBuffer?).self)
        {
            guard let registrationKind = LedgerRegistrationKind(rawValue: Int(kind)) else {
                throw RegistryError.storage("a row of token_history has an unknown kind (\(kind))")
            }
            guard let eventKind = TokenLedgerEvent.Kind(rawValue: Int(event)), eventKind != .registered else {
                throw RegistryError.storage("a row of token_history has an unknown event (\(event))")
            }
            events.append(
                TokenLedgerEvent(
                    kind: eventKind, at: at, registrationKind: registrationKind, activityID: activityID,
                    replacedBy: try replacedBy.map(token), channel: channel, reason: reason,
                    invalidSince: invalidSince))
            events.append(
                TokenLedgerEvent(
                    kind: .registered, at: registeredAt, registrationKind: registrationKind, activityID: activityID))
        }
        return events
    }

    private static func subscription(
        _ activityID: String, appID: Int64, _ bundleID: String, _ environment: APNsEnvironment,
        _ connection: PostgresConnection, _ logger: Logger
    ) async throws -> BroadcastSubscription? {
        for try await (deviceID, type, frequent, createdAt, lastSeenAt, channels) in try await connection.query(
            """
            SELECT s.device_id, s.attributes_type, s.frequent, s.created_at, s.last_seen_at,
                   array(SELECT m.channel FROM subscription_channels m
                         WHERE m.app_id = s.app_id AND m.activity_id = s.activity_id ORDER BY m.channel)
            FROM broadcast_subscriptions s WHERE s.app_id = \(appID) AND s.activity_id = \(activityID)
            """, logger: logger
        ).decode((String?, String?, Bool, Int64, Int64, [String]).self) {
            return BroadcastSubscription(
                activityID: activityID, deviceID: deviceID, attributesType: type, bundleID: bundleID,
                environment: environment, frequentUpdates: frequent, channels: channels, createdAt: createdAt,
                lastSeenAt: lastSeenAt)
        }
        return nil
    }
}

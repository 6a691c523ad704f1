import FanfareCore
import FanfareStorage
import Logging
import PostgresNIO

/// Table `broadcast_links` of migration 9, with SQLiteTokenStore's semantics, and the claim that makes one node
/// of several delete an APNs channel after its match.
extension PostgresTokenStore: BroadcastLinkDeletionClaims {
    public func saveBroadcastLink(
        _ link: BroadcastLink, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) {
        if let reason = link.validationFailure {
            throw .storage("broadcast link of '\(link.channel)' refused: \(reason)")
        }
        try inTransaction(
            "saving the broadcast link of '\(link.channel)'", app: AppKey(bundleID: bundleID, environment: environment)
        ) { connection, logger, appID in
            try await connection.query(
                """
                INSERT INTO broadcast_links (app_id, channel, channel_id, storage_policy, created_by_us, created_at,
                                             delete_after)
                VALUES (\(appID), \(link.channel), \(link.channelID), \(Int16(link.storagePolicy)), \(link.createdByUs),
                        \(link.createdAt), \(link.deleteAfter))
                ON CONFLICT (app_id, channel) DO UPDATE
                SET channel_id = EXCLUDED.channel_id, storage_policy = EXCLUDED.storage_policy,
                    created_by_us = EXCLUDED.created_by_us, created_at = EXCLUDED.created_at,
                    delete_after = EXCLUDED.delete_after, deletion_claimed_by = NULL, deletion_claimed_until = NULL
                """, logger: logger)
        }
    }

    public func broadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> BroadcastLink? {
        try links("reading the broadcast link of '\(channel)'") { connection, logger in
            try await connection.query(
                """
                SELECT \(unescaped: Self.linkColumns) FROM broadcast_links l JOIN apps a ON a.id = l.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                  AND l.channel = \(channel)
                """, logger: logger)
        }.first
    }

    public func broadcastLinks(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> [BroadcastLink] {
        try links("reading the broadcast links of \(bundleID) (\(environment))") { connection, logger in
            try await connection.query(
                """
                SELECT \(unescaped: Self.linkColumns) FROM broadcast_links l JOIN apps a ON a.id = l.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                ORDER BY l.channel
                """, logger: logger)
        }
    }

    @discardableResult
    public func scheduleBroadcastLinkDeletion(
        channel: String, bundleID: String, environment: APNsEnvironment, after: Int64
    ) throws(RegistryError) -> Bool {
        try inTransaction("scheduling the deletion of the broadcast channel of '\(channel)'") { connection, logger in
            let changed =
                try await connection.query(
                    """
                    UPDATE broadcast_links l SET delete_after = \(after) FROM apps a
                    WHERE a.id = l.app_id AND a.bundle_id = \(bundleID)
                      AND a.environment = \(Int16(environment.rawValue)) AND l.channel = \(channel)
                    """, logger: logger
                ).get().metadata.rows ?? 0
            return changed > 0
        }
    }

    public func dueBroadcastLinkDeletions(
        now: Int64, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> [BroadcastLink] {
        try links("reading the broadcast links due for deletion") { connection, logger in
            try await connection.query(
                """
                SELECT \(unescaped: Self.linkColumns) FROM broadcast_links l JOIN apps a ON a.id = l.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                  AND l.delete_after <= \(now)
                ORDER BY l.delete_after, l.channel
                """, logger: logger)
        }
    }

    @discardableResult
    public func removeBroadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> Bool {
        try inTransaction("removing the broadcast link of '\(channel)'") { connection, logger in
            let removed =
                try await connection.query(
                    """
                    DELETE FROM broadcast_links l USING apps a
                    WHERE a.id = l.app_id AND a.bundle_id = \(bundleID)
                      AND a.environment = \(Int16(environment.rawValue)) AND l.channel = \(channel)
                    """, logger: logger
                ).get().metadata.rows ?? 0
            return removed > 0
        }
    }

    /// The claim runs on the database's clock, as leases do.
    public func claimBroadcastLinkDeletion(
        channel: String, bundleID: String, environment: APNsEnvironment, claimant: String, claimFor: Duration
    ) throws(RegistryError) -> Bool {
        let milliseconds = LedgerRetention.milliseconds(claimFor)
        return try inTransaction("claiming the deletion of the broadcast channel of '\(channel)'") {
            connection, logger in
            let claimed =
                try await connection.query(
                    """
                    UPDATE broadcast_links l
                    SET deletion_claimed_by = \(claimant),
                        deletion_claimed_until = clock_timestamp() + \(milliseconds) * interval '1 millisecond'
                    FROM apps a
                    WHERE a.id = l.app_id AND a.bundle_id = \(bundleID)
                      AND a.environment = \(Int16(environment.rawValue)) AND l.channel = \(channel)
                      AND l.delete_after IS NOT NULL
                      AND (l.deletion_claimed_until IS NULL OR l.deletion_claimed_until < clock_timestamp()
                           OR l.deletion_claimed_by = \(claimant))
                    """, logger: logger
                ).get().metadata.rows ?? 0
            return claimed > 0
        }
    }

    // MARK: - Helpers

    private static let linkColumns =
        "l.channel, l.channel_id, l.storage_policy, l.created_by_us, l.created_at, l.delete_after"

    private func links(
        _ operation: String,
        _ query: @escaping @Sendable (PostgresConnection, Logger) async throws -> PostgresRowSequence
    ) throws(RegistryError) -> [BroadcastLink] {
        try inTransaction(operation, begin: Self.beginSnapshotRead) { connection, logger in
            var links: [BroadcastLink] = []
            for try await (channel, channelID, policy, createdByUs, createdAt, deleteAfter) in try await query(
                connection, logger
            ).decode((String, String, Int16, Bool, Int64, Int64?).self) {
                links.append(
                    BroadcastLink(
                        channel: channel, channelID: channelID, storagePolicy: Int(policy), createdByUs: createdByUs,
                        createdAt: createdAt, deleteAfter: deleteAfter))
            }
            return links
        }
    }
}

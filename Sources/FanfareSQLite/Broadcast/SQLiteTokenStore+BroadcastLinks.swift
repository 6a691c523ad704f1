import FanfareStorage
import GRDB
import GRDBSQLite

/// Table `broadcast_links` of migration v4, on the registry's file and queue.
extension SQLiteTokenStore: BroadcastLinkStore {
    public func saveBroadcastLink(
        _ link: BroadcastLink, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError)
    {
        if let reason = link.validationFailure {
            throw .storage("broadcast link of '\(link.channel)' refused: \(reason)")
        }
        try transaction("saving the broadcast link of '\(link.channel)'") { db, memory in
            let appID = try Self.appID(AppKey(bundleID, environment), db, &memory)
            let upsert = try RawStatement(
                db,
                sql: """
                    INSERT INTO broadcast_links (app_id, channel, channel_id, storage_policy, created_by_us, created_at,
                                                 delete_after)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (app_id, channel) DO UPDATE
                    SET channel_id = excluded.channel_id, storage_policy = excluded.storage_policy,
                        created_by_us = excluded.created_by_us, created_at = excluded.created_at,
                        delete_after = excluded.delete_after
                    """)
            upsert.bind(1, appID)
            upsert.bind(2, link.channel)
            upsert.bind(3, link.channelID)
            upsert.bind(4, Int64(link.storagePolicy))
            upsert.bind(5, link.createdByUs)
            upsert.bind(6, link.createdAt)
            upsert.bind(7, link.deleteAfter)
            try upsert.run()
        }
    }

    public func broadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> BroadcastLink?
    {
        try links(bundleID, environment, where: "AND channel = ?", channel).first
    }

    public func broadcastLinks(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [BroadcastLink]
    {
        try links(bundleID, environment, where: "ORDER BY channel")
    }

    @discardableResult
    public func scheduleBroadcastLinkDeletion(
        channel: String, bundleID: String, environment: APNsEnvironment, after: Int64
    ) throws(RegistryError) -> Bool {
        try transaction("scheduling the deletion of the broadcast channel of '\(channel)'") { db, memory in
            guard let appID = memory.appIDs[AppKey(bundleID, environment)] else { return false }
            try db.execute(
                sql: "UPDATE broadcast_links SET delete_after = ? WHERE app_id = ? AND channel = ?",
                arguments: [after, appID, channel])
            return db.changesCount > 0
        }
    }

    public func dueBroadcastLinkDeletions(
        now: Int64, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> [BroadcastLink]
    {
        try links(bundleID, environment, where: "AND delete_after <= ? ORDER BY delete_after, channel", now)
    }

    @discardableResult
    public func removeBroadcastLink(
        channel: String, bundleID: String, environment: APNsEnvironment
    )
        throws(RegistryError) -> Bool
    {
        try transaction("removing the broadcast link of '\(channel)'") { db, memory in
            guard let appID = memory.appIDs[AppKey(bundleID, environment)] else { return false }
            try db.execute(
                sql: "DELETE FROM broadcast_links WHERE app_id = ? AND channel = ?", arguments: [appID, channel])
            return db.changesCount > 0
        }
    }

    // MARK: - Helpers

    /// The links of one app matching `clause` (appended after `WHERE app_id = ?`), binding `values` after the app.
    private func links(
        _ bundleID: String, _ environment: APNsEnvironment, where clause: String, _ value: String
    )
        throws(RegistryError) -> [BroadcastLink]
    {
        try links(bundleID, environment, where: clause) { $0.bind(2, value) }
    }

    private func links(
        _ bundleID: String, _ environment: APNsEnvironment, where clause: String, _ value: Int64
    )
        throws(RegistryError) -> [BroadcastLink]
    {
        try links(bundleID, environment, where: clause) { $0.bind(2, value) }
    }

    private func links(
        _ bundleID: String, _ environment: APNsEnvironment, where clause: String,
        bind: (RawStatement) -> Void = { _ in }
    ) throws(RegistryError) -> [BroadcastLink] {
        try access("reading the broadcast links of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [] }
            let select = try RawStatement(
                db,
                sql: """
                    SELECT channel, channel_id, storage_policy, created_by_us, created_at, delete_after
                    FROM broadcast_links WHERE app_id = ? \(clause)
                    """)
            select.bind(1, appID)
            bind(select)
            defer { select.reset() }
            var links: [BroadcastLink] = []
            while try select.step() {
                let columns = StoredWaveColumns(row: select, name: "a row of broadcast_links")
                links.append(
                    BroadcastLink(
                        channel: try columns.text(0, "channel"), channelID: try columns.text(1, "channel_id"),
                        storagePolicy: try columns.count(2, "storage_policy"),
                        createdByUs: try columns.flag(3, "created_by_us"),
                        createdAt: try columns.integer(4, "created_at"),
                        deleteAfter: try columns.optionalInteger(5, "delete_after")))
            }
            return links
        }
    }
}

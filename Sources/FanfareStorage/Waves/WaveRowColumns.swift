/// The columns of one stored row of the wave tables, whatever the database (`StoredWaveColumns` on SQLite,
/// `PostgresWaveColumns`): each reads strictly, so a corrupt value is a `.storage` error naming the row. The rows'
/// decoders are written once against it (`WaveReportRecord.init(row:)`).
package protocol WaveRowColumns {
    func integer(_ column: Int, _ field: String) throws -> Int64
    func optionalInteger(_ column: Int, _ field: String) throws -> Int64?
    /// A count or size: an integer, not negative.
    func count(_ column: Int, _ field: String) throws -> Int
    /// Nanoseconds: an integer, not negative, or NULL.
    func optionalNanoseconds(_ column: Int, _ field: String) throws -> UInt64?
    func text(_ column: Int, _ field: String) throws -> String
    func optionalText(_ column: Int, _ field: String) throws -> String?
    func environment(_ column: Int) throws -> APNsEnvironment
    /// The failure counts by reason, as stored.
    func failureCounts(_ column: Int) throws -> [String: Int]
    func flag(_ column: Int, _ field: String) throws -> Bool
    func bytes(_ column: Int, _ field: String) throws -> [UInt8]
    func optionalBytes(_ column: Int, _ field: String) throws -> [UInt8]?
    /// The start keys, as `WaveColumnEncoding` stores them.
    func startKeys(_ column: Int) throws -> [UInt64]
}

extension WaveRecord {
    /// A published wave from a row of the stores' wave query, whose 15 columns come in this order: id, channel,
    /// event, timestamp, priority, has_alert, payload, fresh_until, collapse_id, dismissal_date, published_at,
    /// shard_count, start_keys, broadcast_channel_id, channel_payload.
    package init(row columns: some WaveRowColumns, bundleID: String, environment: APNsEnvironment) throws {
        self.init(
            id: UInt64(try columns.count(0, "id")), bundleID: bundleID, environment: environment,
            channel: try columns.text(1, "channel"), event: try columns.text(2, "event"),
            timestamp: try columns.integer(3, "timestamp"), priority: try columns.text(4, "priority"),
            hasAlert: try columns.flag(5, "has_alert"), payload: try columns.bytes(6, "payload"),
            freshUntil: try columns.optionalInteger(7, "fresh_until"),
            collapseID: try columns.optionalText(8, "collapse_id"),
            dismissalDate: try columns.optionalInteger(9, "dismissal_date"),
            publishedAt: try columns.integer(10, "published_at"),
            shardCount: try columns.count(11, "shard_count"), startKeys: try columns.startKeys(12),
            broadcastChannelID: try columns.optionalText(13, "broadcast_channel_id"),
            channelPayload: try columns.optionalBytes(14, "channel_payload"))
    }
}

extension WaveReportRecord {
    /// A final report from a row of the stores' report query, whose 30 columns come in this order: id, app
    /// (bundle id), environment, channel, event, timestamp, published_at, completed_at, the eleven counters
    /// (targeted ... resent_after_restart), restarts, failures by reason, time to first ack, makespan, and the
    /// broadcast part (channel id, subscribers, requests, outcome, reason, priority, flags).
    package init(row columns: some WaveRowColumns) throws {
        self.init(
            id: UInt64(try columns.count(0, "id")), bundleID: try columns.text(1, "app (bundle id)"),
            environment: try columns.environment(2), channel: try columns.text(3, "channel"),
            event: try columns.text(4, "event"), timestamp: try columns.integer(5, "timestamp"),
            publishedAt: try columns.integer(6, "published_at"), completedAt: try columns.integer(7, "completed_at"))
        targeted = try columns.count(8, "targeted")
        sent = try columns.count(9, "sent")
        delivered = try columns.count(10, "delivered")
        failed = try columns.count(11, "failed")
        superseded = try columns.count(12, "superseded")
        downgraded = try columns.count(13, "downgraded")
        expired = try columns.count(14, "expired")
        invalidated = try columns.count(15, "invalidated")
        retried = try columns.count(16, "retried")
        possibleDuplicates = try columns.count(17, "possible_duplicates")
        resentAfterRestart = try columns.count(18, "resent_after_restart")
        restarts = try columns.count(19, "restarts")
        failedByReason = try columns.failureCounts(20)
        timeToFirstAck = try columns.optionalNanoseconds(21, "time_to_first_ack")
        makespan = try columns.optionalNanoseconds(22, "makespan")
        if let channelID = try columns.optionalText(23, "report_broadcast_channel_id") {
            broadcast = BroadcastPartRecord(
                channelID: channelID, subscribers: try columns.count(24, "broadcast_subscribers"),
                requests: try columns.count(25, "broadcast_requests"),
                outcome: try columns.text(26, "broadcast_outcome"),
                reason: try columns.optionalText(27, "broadcast_reason"),
                priority: try columns.optionalInteger(28, "broadcast_priority").map { Int(truncatingIfNeeded: $0) })
            let flags = try columns.optionalInteger(29, "broadcast_flags") ?? 0
            broadcast?.downgraded = flags & BroadcastPartRecord.downgradedFlag != 0
            broadcast?.resentAfterRestart = flags & BroadcastPartRecord.resentFlag != 0
        }
    }
}

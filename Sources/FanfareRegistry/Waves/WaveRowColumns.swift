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
}

extension WaveReportRecord {
    /// A final report from a row of the stores' report query, whose 29 columns come in this order: id, app
    /// (bundle id), environment, channel, event, timestamp, published_at, completed_at, the eleven counters
    /// (targeted ... resent_after_restart), restarts, failures by reason, time to first ack, makespan, and the
    /// broadcast part (channel id, subscribers, requests, outcome, reason, priority).
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
        }
    }
}

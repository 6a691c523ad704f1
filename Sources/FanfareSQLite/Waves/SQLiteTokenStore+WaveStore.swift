import FanfareStorage
import GRDB

/// The wave tables of migration "v3: waves" (RegistrySchema), on the registry's own file and queue: each call
/// is one transaction (or one read) through the store's connection, durable when it returns.
extension SQLiteTokenStore: WaveStore {
    // MARK: - Writes

    public func saveWave(_ wave: WaveRecord) throws(RegistryError) {
        try saveWaves([wave])
    }

    public func saveWaves(_ waves: [WaveRecord]) throws(RegistryError) {
        guard !waves.isEmpty else { return }
        var ids: [Int64] = []
        for wave in waves { ids.append(try WaveValidation.check(wave)) }
        let checked = ids
        let name = waves.count == 1 ? "wave \(waves[0].id)" : "waves \(waves.map(\.id)) as one publication"
        try transaction("saving \(name)") { db, memory in
            for (wave, id) in zip(waves, checked) { try Self.insert(wave, id: id, db, &memory) }
            guard checked.count > 1 else { return }
            let part = try RawStatement(
                db, sql: "INSERT INTO publication_parts (wave_id, publication_id, part) VALUES (?, ?, ?)")
            for (index, id) in checked.enumerated() {
                part.bind(1, id)
                part.bind(2, checked[0])
                part.bind(3, Int64(index))
                try part.run()
                part.reset()
            }
        }
    }

    public func publicationParts(of id: UInt64) throws(RegistryError) -> [UInt64] {
        try access("reading the parts of publication \(id)") { db in
            let parts = try Int64.fetchAll(
                db, sql: "SELECT wave_id FROM publication_parts WHERE publication_id = ? ORDER BY part",
                arguments: [Int64(truncatingIfNeeded: id)])
            return parts.isEmpty ? [id] : parts.map { UInt64($0) }
        }
    }

    /// One wave's row and its channel's latest timestamp, inside the caller's transaction.
    private static func insert(
        _ wave: WaveRecord, id: Int64, _ db: Database, _ memory: inout RegistryMemoryState
    ) throws {
        let appID = try Self.appID(AppKey(wave.bundleID, wave.environment), db, &memory)
        // OR IGNORE, then a check: an id saved before is the caller's mistake, not a storage fault.
        let insert = try RawStatement(
            db,
            sql: """
                INSERT OR IGNORE INTO waves (id, app_id, channel, event, timestamp, priority, has_alert, payload,
                                             fresh_until, collapse_id, dismissal_date, published_at, shard_count,
                                             start_keys, broadcast_channel_id, channel_payload)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
        insert.bind(1, id)
        insert.bind(2, appID)
        insert.bind(3, wave.channel)
        insert.bind(4, wave.event)
        insert.bind(5, wave.timestamp)
        insert.bind(6, wave.priority)
        insert.bind(7, wave.hasAlert)
        insert.bind(8, blob: wave.payload)
        insert.bind(9, wave.freshUntil)
        insert.bind(10, wave.collapseID)
        insert.bind(11, wave.dismissalDate)
        insert.bind(12, wave.publishedAt)
        insert.bind(13, Int64(wave.shardCount))
        insert.bind(14, blob: WaveColumnEncoding.startKeys(wave.startKeys))
        insert.bind(15, wave.broadcastChannelID)
        if let channelPayload = wave.channelPayload {
            insert.bind(16, blob: channelPayload)
        } else {
            insert.bind(16, nil as Int64?)
        }
        try insert.run()
        guard insert.changes == 1 else {
            throw RegistryError.invalidWave(id: wave.id, reason: "a wave with this id is already saved")
        }
        let raise = try RawStatement(
            db,
            sql: """
                INSERT INTO channel_latest (app_id, channel, timestamp) VALUES (?, ?, ?)
                ON CONFLICT (app_id, channel) DO UPDATE SET timestamp = max(timestamp, excluded.timestamp)
                """)
        raise.bind(1, appID)
        raise.bind(2, wave.channel)
        raise.bind(3, wave.timestamp)
        try raise.run()
    }

    public func saveCheckpoints(_ checkpoints: [WaveCheckpoint]) throws(RegistryError) {
        guard !checkpoints.isEmpty else { return }
        for checkpoint in checkpoints { _ = try WaveValidation.check(checkpoint) }
        try transaction("saving \(checkpoints.count) wave checkpoints") { db, _ in
            // One statement per row: the EXISTS keeps a checkpoint that arrives after its wave completed (or of
            // a wave never saved) out, within the same transaction as the write.
            let upsert = try RawStatement(
                db,
                sql: """
                    INSERT INTO wave_checkpoints (wave_id, shard, data, saved_at)
                    SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM waves WHERE id = ?1 AND completed_at IS NULL)
                    ON CONFLICT (wave_id, shard) DO UPDATE SET data = excluded.data, saved_at = excluded.saved_at
                    """)
            for checkpoint in checkpoints {
                guard let waveID = Int64(exactly: checkpoint.waveID) else { continue }  // no such wave
                upsert.bind(1, waveID)
                upsert.bind(2, Int64(checkpoint.shard))
                upsert.bind(3, blob: checkpoint.data)
                upsert.bind(4, checkpoint.savedAt)
                try upsert.run()
            }
        }
    }

    public func completeWave(_ report: WaveReportRecord) throws(RegistryError) {
        let id = try WaveValidation.check(report)
        let failedByReason = WaveColumnEncoding.failureCounts(report.failedByReason)
        try transaction("completing wave \(report.id)") { db, memory in
            try Self.checkReportMatchesWave(
                report, id: id, appID: memory.appIDs[AppKey(report.bundleID, report.environment)], db)
            // Completing again replaces the report (the same wave, a later count).
            let update = try RawStatement(
                db,
                sql: """
                    UPDATE waves
                    SET completed_at = ?, targeted = ?, sent = ?, delivered = ?, failed = ?, superseded = ?,
                        downgraded = ?, expired = ?, invalidated = ?, retried = ?, possible_duplicates = ?,
                        resent_after_restart = ?, restarts = ?, failed_by_reason = ?, time_to_first_ack = ?, makespan
                            = ?,
                        report_broadcast_channel_id = ?, broadcast_subscribers = ?, broadcast_requests = ?,
                        broadcast_outcome = ?, broadcast_reason = ?, broadcast_priority = ?, broadcast_flags = ?
                    WHERE id = ?
                    """)
            update.bind(1, report.completedAt)
            let counters = [
                report.targeted, report.sent, report.delivered, report.failed, report.superseded, report.downgraded,
                report.expired, report.invalidated, report.retried, report.possibleDuplicates,
                report.resentAfterRestart, report.restarts,
            ]
            for (offset, counter) in counters.enumerated() { update.bind(Int32(2 + offset), Int64(counter)) }
            update.bind(14, failedByReason)
            update.bind(15, report.timeToFirstAck.map { Int64($0) })  // checked to fit
            update.bind(16, report.makespan.map { Int64($0) })
            let broadcast = report.broadcast
            update.bind(17, broadcast?.channelID)
            update.bind(18, broadcast.map { Int64($0.subscribers) })
            update.bind(19, broadcast.map { Int64($0.requests) })
            update.bind(20, broadcast?.outcome)
            update.bind(21, broadcast?.reason)
            update.bind(22, broadcast?.priority.map { Int64($0) })
            update.bind(23, broadcast?.flags)
            update.bind(24, id)
            try update.run()
            let deleteCheckpoints = try RawStatement(db, sql: "DELETE FROM wave_checkpoints WHERE wave_id = ?")
            deleteCheckpoints.bind(1, id)
            try deleteCheckpoints.run()
        }
    }

    public func saveRetirement(
        bundleID: String, environment: APNsEnvironment, channel: String, dueAt: Int64
    )
        throws(RegistryError)
    {
        try transaction("saving the retirement of channel '\(channel)'") { db, memory in
            let appID = try Self.appID(AppKey(bundleID, environment), db, &memory)
            let upsert = try RawStatement(
                db,
                sql: """
                    INSERT INTO pending_retirements (app_id, channel, due_at) VALUES (?, ?, ?)
                    ON CONFLICT (app_id, channel) DO UPDATE SET due_at = excluded.due_at
                    """)
            upsert.bind(1, appID)
            upsert.bind(2, channel)
            upsert.bind(3, dueAt)
            try upsert.run()
        }
    }

    public func removeRetirements(
        bundleID: String, environment: APNsEnvironment, channels: [String]
    )
        throws(RegistryError)
    {
        guard !channels.isEmpty else { return }
        try transaction("removing \(channels.count) pending retirements") { db, memory in
            guard let appID = memory.appIDs[AppKey(bundleID, environment)] else { return }
            let delete = try RawStatement(db, sql: "DELETE FROM pending_retirements WHERE app_id = ? AND channel = ?")
            for channel in channels {
                delete.bind(1, appID)
                delete.bind(2, channel)
                try delete.run()
            }
        }
    }

    @discardableResult
    public func pruneWaveReports(keeping: Int) throws(RegistryError) -> Int {
        // Keeping none (or fewer) deletes every report; unfinished waves are never touched.
        let keeping = Int64(max(0, keeping))
        return try transaction("pruning wave reports") { db, _ in
            let delete = try RawStatement(
                db,
                sql: """
                    DELETE FROM waves WHERE id IN (
                        SELECT id FROM (
                            SELECT id, row_number() OVER (PARTITION BY app_id ORDER BY id DESC) AS newness
                            FROM waves WHERE completed_at IS NOT NULL
                        ) WHERE newness > ?
                    )
                    """)
            delete.bind(1, keeping)
            try delete.run()
            let pruned = delete.changes
            if pruned > 0 {
                try db.execute(
                    sql: "DELETE FROM publication_parts WHERE NOT EXISTS (SELECT 1 FROM waves WHERE id = wave_id)")
            }
            return pruned
        }
    }

    // MARK: - Reads

    public func unfinishedWaves(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [UnfinishedWave]
    {
        try access("loading the unfinished waves of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [] }
            let rows = try RawStatement(
                db,
                sql: """
                    SELECT id, channel, event, timestamp, priority, has_alert, payload, fresh_until, collapse_id,
                           dismissal_date, published_at, shard_count, start_keys, broadcast_channel_id, channel_payload
                    FROM waves WHERE app_id = ? AND completed_at IS NULL ORDER BY id
                    """)
            rows.bind(1, appID)
            var waves: [UnfinishedWave] = []
            var positions: [Int64: Int] = [:]
            do {
                defer { rows.reset() }
                while try rows.step() {
                    let rowID = rows.int64(0)
                    let columns = StoredWaveColumns(row: rows, name: "wave \(rowID)")
                    let record = try WaveRecord(row: columns, bundleID: bundleID, environment: environment)
                    positions[rowID] = waves.count
                    waves.append(UnfinishedWave(record: record, checkpoints: []))
                }
            }
            guard !waves.isEmpty else { return [] }

            let checkpoints = try RawStatement(
                db,
                sql: """
                    SELECT c.wave_id, c.shard, c.data, c.saved_at
                    FROM waves AS w JOIN wave_checkpoints AS c ON c.wave_id = w.id
                    WHERE w.app_id = ? AND w.completed_at IS NULL
                    ORDER BY c.wave_id, c.shard
                    """)
            checkpoints.bind(1, appID)
            defer { checkpoints.reset() }
            while try checkpoints.step() {
                let rowID = checkpoints.int64(0)
                let columns = StoredWaveColumns(row: checkpoints, name: "a checkpoint of wave \(rowID)")
                // The join only returns checkpoints of the waves read above (same snapshot: one queue).
                guard let position = positions[rowID] else { continue }
                waves[position].checkpoints.append(
                    WaveCheckpoint(
                        waveID: waves[position].record.id, shard: try columns.count(1, "shard"),
                        data: try columns.bytes(2, "data"), savedAt: try columns.integer(3, "saved_at")))
            }
            return waves
        }
    }

    public func waveReport(id: UInt64) throws(RegistryError) -> WaveReportRecord? {
        guard let rowID = Int64(exactly: id) else { return nil }
        return try access("reading the report of wave \(id)") { db in
            let select = try RawStatement(
                db, sql: Self.selectReports + " WHERE w.id = ? AND w.completed_at IS NOT NULL")
            select.bind(1, rowID)
            defer { select.reset() }
            guard try select.step() else { return nil }
            return try Self.report(select)
        }
    }

    public func waveReports(
        bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError)
        -> [WaveReportRecord]
    {
        guard limit > 0 else { return [] }
        return try access("reading the wave reports of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [] }
            let select = try RawStatement(
                db,
                sql: Self.selectReports
                    + " WHERE w.app_id = ? AND w.completed_at IS NOT NULL ORDER BY w.id DESC LIMIT ?")
            select.bind(1, appID)
            select.bind(2, Int64(limit))
            defer { select.reset() }
            var reports: [WaveReportRecord] = []
            while try select.step() { reports.append(try Self.report(select)) }
            return reports
        }
    }

    public func latestTimestamps(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [String: Int64]
    {
        try access("reading the latest timestamps of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [:] }
            return try Self.channelValues(
                db, sql: "SELECT channel, timestamp FROM channel_latest WHERE app_id = ?",
                appID: appID, table: "channel_latest")
        }
    }

    public func pendingRetirements(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [String: Int64]
    {
        try access("reading the pending retirements of \(bundleID) (\(environment))") { db in
            guard let appID = memory.withLock({ $0.appIDs[AppKey(bundleID, environment)] }) else { return [:] }
            return try Self.channelValues(
                db, sql: "SELECT channel, due_at FROM pending_retirements WHERE app_id = ?",
                appID: appID, table: "pending_retirements")
        }
    }

    public func lastWaveID() throws(RegistryError) -> UInt64 {
        try access("reading the last wave id") { db in
            // sqlite_sequence remembers the highest id ever inserted (AUTOINCREMENT), even once pruned; max(id)
            // as well, in case the sequence row was lost.
            let select = try RawStatement(
                db,
                sql: """
                    SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'waves'), 0),
                               coalesce((SELECT max(id) FROM waves), 0))
                    """)
            defer { select.reset() }
            guard try select.step() else { return 0 }
            let last = try StoredWaveColumns(row: select, name: "the last wave id").integer(0, "value")
            guard let id = UInt64(exactly: last) else {
                throw RegistryError.storage(
                    "the last wave id in the database is negative (\(last)); the file is corrupt")
            }
            return id
        }
    }

    // MARK: - Helpers

    /// A report row: id, app, identity, completion, then the counters (see `report`).
    private static let selectReports = """
        SELECT w.id, a.bundle_id, a.environment, w.channel, w.event, w.timestamp, w.published_at, w.completed_at,
               w.targeted, w.sent, w.delivered, w.failed, w.superseded, w.downgraded, w.expired, w.invalidated,
               w.retried, w.possible_duplicates, w.resent_after_restart, w.restarts, w.failed_by_reason,
               w.time_to_first_ack, w.makespan, w.report_broadcast_channel_id, w.broadcast_subscribers,
               w.broadcast_requests, w.broadcast_outcome, w.broadcast_reason, w.broadcast_priority,
               w.broadcast_flags
        FROM waves AS w LEFT JOIN apps AS a ON a.id = w.app_id
        """

    private static func report(_ row: RawStatement) throws -> WaveReportRecord {
        try WaveReportRecord(row: StoredWaveColumns(row: row, name: "wave \(row.int64(0))"))
    }

    /// `channel -> value` rows of one app (`SELECT channel, value ... WHERE app_id = ?`).
    private static func channelValues(
        _ db: Database, sql: String, appID: Int64, table: String
    ) throws
        -> [String: Int64]
    {
        let select = try RawStatement(db, sql: sql)
        select.bind(1, appID)
        defer { select.reset() }
        var values: [String: Int64] = [:]
        while try select.step() {
            let columns = StoredWaveColumns(row: select, name: "a row of \(table)")
            values[try columns.text(0, "channel")] = try columns.integer(1, "value")
        }
        return values
    }

    /// Throws unless wave `id` is saved, for the report's app, channel, event, timestamp and publish time: a
    /// report of another wave under this id is the caller's mistake and must not overwrite it.
    private static func checkReportMatchesWave(
        _ report: WaveReportRecord, id: Int64, appID: Int64?, _ db: Database
    ) throws {
        let select = try RawStatement(
            db, sql: "SELECT app_id, channel, event, timestamp, published_at FROM waves WHERE id = ?")
        select.bind(1, id)
        defer { select.reset() }
        guard try select.step() else { throw RegistryError.unknownWave(id: report.id) }
        let columns = StoredWaveColumns(row: select, name: "wave \(id)")
        var differences: [String] = []
        if try columns.integer(0, "app_id") != appID {
            differences.append("app")
        }
        if try columns.text(1, "channel") != report.channel { differences.append("channel") }
        if try columns.text(2, "event") != report.event { differences.append("event") }
        if try columns.integer(3, "timestamp") != report.timestamp { differences.append("timestamp") }
        if try columns.integer(4, "published_at") != report.publishedAt { differences.append("publishedAt") }
        guard differences.isEmpty else {
            throw RegistryError.invalidWave(
                id: report.id,
                reason: "the report's \(differences.joined(separator: ", ")) differ from the saved wave's")
        }
    }
}

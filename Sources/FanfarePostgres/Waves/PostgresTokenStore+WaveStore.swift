import FanfareCore
import FanfareStorage
import Logging
import NIOCore
import PostgresNIO

/// The wave tables of migration 2 (PostgresSchema) with SQLiteTokenStore's semantics: each call is one
/// transaction on the store's connection, committed (synchronous commit) when it returns. Rows that hold what
/// no call writes are `.storage` errors naming the row (`PostgresWaveColumns`).
///
/// Several nodes may write the same wave: the rows a call checks are locked in the same transaction (a
/// checkpoint takes the wave row FOR SHARE, completion FOR UPDATE), so a checkpoint that races a completion
/// either lands before it (and is deleted by it) or sees the wave complete and is ignored.
extension PostgresTokenStore: WaveStore {
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
        let first = AppKey(bundleID: waves[0].bundleID, environment: waves[0].environment)
        try inTransaction("saving \(name)", app: first) { connection, logger, firstAppID in
            for (index, wave) in waves.enumerated() {
                let key = AppKey(bundleID: wave.bundleID, environment: wave.environment)
                let appID = key == first ? firstAppID : try await Self.appID(key, connection, logger)
                try await Self.insert(wave, id: checked[index], appID: appID, connection, logger)
                guard checked.count > 1 else { continue }
                try await connection.query(
                    """
                    INSERT INTO publication_parts (wave_id, publication_id, part)
                    VALUES (\(checked[index]), \(checked[0]), \(Int32(index)))
                    """, logger: logger)
            }
        }
    }

    public func publicationParts(of id: UInt64) throws(RegistryError) -> [UInt64] {
        let publication = Int64(truncatingIfNeeded: id)
        return try inTransaction("reading the parts of publication \(id)") { connection, logger in
            var parts: [UInt64] = []
            for try await part in try await connection.query(
                "SELECT wave_id FROM publication_parts WHERE publication_id = \(publication) ORDER BY part",
                logger: logger
            ).decode(Int64.self) {
                parts.append(UInt64(part))
            }
            return parts.isEmpty ? [id] : parts
        }
    }

    /// One wave's row and its channel's latest timestamp, inside the caller's transaction.
    static func insert(
        _ wave: WaveRecord, id: Int64, appID: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        let payload = ByteBuffer(bytes: wave.payload)
        let startKeys = ByteBuffer(bytes: WaveColumnEncoding.startKeys(wave.startKeys))
        let channelPayload = wave.channelPayload.map { ByteBuffer(bytes: $0) }
        // DO NOTHING, then a check: an id saved before is the caller's mistake, not a storage fault.
        let inserted =
            try await connection.query(
                """
                INSERT INTO waves (id, app_id, channel, event, timestamp, priority, has_alert, payload, fresh_until,
                                   collapse_id, dismissal_date, published_at, shard_count, start_keys,
                                   broadcast_channel_id, channel_payload)
                VALUES (\(id), \(appID), \(wave.channel), \(wave.event), \(wave.timestamp), \(wave.priority),
                        \(wave.hasAlert), \(payload), \(wave.freshUntil), \(wave.collapseID), \(wave.dismissalDate),
                        \(wave.publishedAt), \(Int64(wave.shardCount)), \(startKeys), \(wave.broadcastChannelID),
                        \(channelPayload))
                ON CONFLICT (id) DO NOTHING
                """, logger: logger
            ).get().metadata.rows ?? 0
        guard inserted == 1 else {
            throw RegistryError.invalidWave(id: wave.id, reason: "a wave with this id is already saved")
        }
        try await connection.query(
            """
            INSERT INTO channel_latest (app_id, channel, timestamp) VALUES (\(appID), \(wave.channel),
                \(wave.timestamp))
            ON CONFLICT (app_id, channel) DO UPDATE
            SET timestamp = greatest(channel_latest.timestamp, EXCLUDED.timestamp)
            """, logger: logger)
    }

    public func saveCheckpoints(_ checkpoints: [WaveCheckpoint]) throws(RegistryError) {
        guard !checkpoints.isEmpty else { return }
        var rows: [(waveID: Int64, shard: Int64, data: ByteBuffer, savedAt: Int64)] = []
        for checkpoint in checkpoints {
            // An id no wave can have is ignored, like any unknown wave.
            guard let waveID = try WaveValidation.check(checkpoint) else { continue }
            rows.append((waveID, Int64(checkpoint.shard), ByteBuffer(bytes: checkpoint.data), checkpoint.savedAt))
        }
        let written = rows
        let fence = checkpointFence?.leases
        let fenced = try inTransaction("saving \(checkpoints.count) wave checkpoints") {
            connection, logger -> Set<Int64> in
            // The unfinished ones among the batch's waves, locked until the commit: a completion waits for it,
            // and a checkpoint of a wave complete or never saved is left out.
            let ids = Array(Set(written.map(\.waveID))).sorted()
            var unfinished = Set<Int64>()
            for try await id in try await connection.query(
                "SELECT id FROM waves WHERE id = ANY(\(ids)) AND completed_at IS NULL ORDER BY id FOR SHARE",
                logger: logger
            ).decode(Int64.self) {
                unfinished.insert(id)
            }
            // Several nodes: only shards whose lease this node still holds at its epoch, locked until the commit
            // (a node taking the lease waits for it): a stale node cannot overwrite newer progress.
            var allowed: Set<Int64>?
            if let fence {
                var held = Set<Int64>()
                for try await shard in try await connection.query(
                    """
                    SELECT l.shard FROM shard_leases AS l
                    JOIN unnest(\(fence.shards.map(Int32.init))::integer[], \(fence.epochs)::bigint[]) AS mine (shard,
                        epoch)
                      ON l.shard = mine.shard AND l.epoch = mine.epoch
                    WHERE l.node = \(fence.node) ORDER BY l.shard FOR SHARE OF l
                    """, logger: logger
                ).decode(Int32.self) {
                    held.insert(Int64(shard))
                }
                allowed = held
            }
            // One statement per row, in batch order: a (wave, shard) twice in one batch keeps the last.
            for row in written where unfinished.contains(row.waveID) && allowed?.contains(row.shard) != false {
                try await connection.query(
                    """
                    INSERT INTO wave_checkpoints (wave_id, shard, data, saved_at)
                    VALUES (\(row.waveID), \(row.shard), \(row.data), \(row.savedAt))
                    ON CONFLICT (wave_id, shard) DO UPDATE SET data = EXCLUDED.data, saved_at = EXCLUDED.saved_at
                    """, logger: logger)
            }
            guard let allowed else { return [] }
            return Set(written.map(\.shard)).subtracting(allowed)
        }
        if !fenced.isEmpty { checkpointFence?.refused(Set(fenced.map { Int($0) })) }
    }

    public func completeWave(_ report: WaveReportRecord) throws(RegistryError) {
        let id = try WaveValidation.check(report)
        let failedByReason = WaveColumnEncoding.failureCounts(report.failedByReason)
        try inTransaction("completing wave \(report.id)") { connection, logger in
            try await Self.checkReportMatchesWave(report, id: id, connection, logger)
            let broadcast = report.broadcast
            // Completing again replaces the report (the same wave, a later count).
            try await connection.query(
                """
                UPDATE waves
                SET completed_at = \(report.completedAt), targeted = \(Int64(report.targeted)),
                    sent = \(Int64(report.sent)), delivered = \(Int64(report.delivered)),
                    failed = \(Int64(report.failed)), superseded = \(Int64(report.superseded)),
                    downgraded = \(Int64(report.downgraded)), expired = \(Int64(report.expired)),
                    invalidated = \(Int64(report.invalidated)), retried = \(Int64(report.retried)),
                    possible_duplicates = \(Int64(report.possibleDuplicates)),
                    resent_after_restart = \(Int64(report.resentAfterRestart)), restarts = \(Int64(report.restarts)),
                    failed_by_reason = \(failedByReason),
                    time_to_first_ack = \(report.timeToFirstAck.map { Int64($0) }),
                    makespan = \(report.makespan.map { Int64($0) }),
                    report_broadcast_channel_id = \(broadcast?.channelID),
                    broadcast_subscribers = \(broadcast.map { Int64($0.subscribers) }),
                    broadcast_requests = \(broadcast.map { Int64($0.requests) }),
                    broadcast_outcome = \(broadcast?.outcome), broadcast_reason = \(broadcast?.reason),
                    broadcast_priority = \(broadcast?.priority.map { Int64($0) }),
                    broadcast_flags = \(broadcast?.flags)
                WHERE id = \(id)
                """, logger: logger)
            try await connection.query("DELETE FROM wave_checkpoints WHERE wave_id = \(id)", logger: logger)
        }
    }

    public func saveRetirement(
        bundleID: String, environment: APNsEnvironment, channel: String, dueAt: Int64
    )
        throws(RegistryError)
    {
        let app = AppKey(bundleID: bundleID, environment: environment)
        try inTransaction("saving the retirement of channel '\(channel)'", app: app) { connection, logger, appID in
            try await connection.query(
                """
                INSERT INTO pending_retirements (app_id, channel, due_at) VALUES (\(appID), \(channel), \(dueAt))
                ON CONFLICT (app_id, channel) DO UPDATE SET due_at = EXCLUDED.due_at
                """, logger: logger)
        }
    }

    public func removeRetirements(
        bundleID: String, environment: APNsEnvironment, channels: [String]
    )
        throws(RegistryError)
    {
        guard !channels.isEmpty else { return }
        try inTransaction("removing \(channels.count) pending retirements") { connection, logger in
            try await connection.query(
                """
                DELETE FROM pending_retirements p USING apps a
                WHERE a.id = p.app_id AND a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                  AND p.channel = ANY(\(channels))
                """, logger: logger)
        }
    }

    @discardableResult
    public func pruneWaveReports(keeping: Int) throws(RegistryError) -> Int {
        // Keeping none (or fewer) deletes every report; unfinished waves are never touched.
        let keeping = Int64(max(0, keeping))
        return try inTransaction("pruning wave reports") { connection, logger in
            var deleted = 0
            var highest: Int64?
            for try await (count, maximum) in try await connection.query(
                """
                WITH deleted AS (
                    DELETE FROM waves WHERE id IN (
                        SELECT id FROM (
                            SELECT id, row_number() OVER (PARTITION BY app_id ORDER BY id DESC) AS newness
                            FROM waves WHERE completed_at IS NOT NULL
                        ) AS ranked WHERE newness > \(keeping)
                    )
                    RETURNING id
                )
                SELECT count(*), max(id) FROM deleted
                """, logger: logger
            ).decode((Int64, Int64?).self) {
                deleted = Int(count)
                highest = maximum
            }
            // Their ids are not reused: `lastWaveID` remembers the highest one deleted.
            if let highest {
                try await connection.query(
                    "DELETE FROM publication_parts p WHERE NOT EXISTS (SELECT 1 FROM waves w WHERE w.id = p.wave_id)",
                    logger: logger)
                try await connection.query(
                    """
                    INSERT INTO pruned_wave_ids (singleton, highest) VALUES (true, \(highest))
                    ON CONFLICT (singleton) DO UPDATE SET highest = greatest(pruned_wave_ids.highest, EXCLUDED.highest)
                    """, logger: logger)
            }
            return deleted
        }
    }

    // MARK: - Reads

    public func unfinishedWaves(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [UnfinishedWave]
    {
        // Both queries read one snapshot.
        try inTransaction(
            "loading the unfinished waves of \(bundleID) (\(environment))", begin: Self.beginSnapshotRead
        ) { connection, logger in
            var waves: [UnfinishedWave] = []
            var positions: [Int64: Int] = [:]
            for try await row in try await connection.query(
                """
                SELECT \(unescaped: Self.waveColumns)
                FROM waves AS w JOIN apps AS a ON a.id = w.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                  AND w.completed_at IS NULL
                ORDER BY w.id
                """, logger: logger)
            {
                let record = try Self.waveRecord(row, bundleID: bundleID, environment: environment)
                let id = Int(record.id)
                positions[Int64(id)] = waves.count
                waves.append(UnfinishedWave(record: record, checkpoints: []))
            }
            guard !waves.isEmpty else { return [] }
            for try await row in try await connection.query(
                """
                SELECT c.wave_id, c.shard, c.data, c.saved_at
                FROM wave_checkpoints AS c JOIN waves AS w ON w.id = c.wave_id JOIN apps AS a ON a.id = w.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue))
                  AND w.completed_at IS NULL
                ORDER BY c.wave_id, c.shard
                """, logger: logger)
            {
                let columns = PostgresWaveColumns(row) { "a checkpoint of " + PostgresWaveColumns.waveName($0) }
                // The same snapshot as the waves above, so every checkpoint's wave was read.
                guard let position = positions[try columns.integer(0, "wave_id")] else { continue }
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
        return try inTransaction("reading the report of wave \(id)", begin: Self.beginSnapshotRead) {
            connection, logger in
            var query = PostgresQuery(unsafeSQL: Self.selectReports + " WHERE w.id = $1 AND w.completed_at IS NOT NULL")
            query.binds.append(rowID, context: .default)
            for try await row in try await connection.query(query, logger: logger) {
                return try Self.report(row)
            }
            return nil
        }
    }

    public func waveReports(
        bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError)
        -> [WaveReportRecord]
    {
        guard limit > 0 else { return [] }
        return try inTransaction(
            "reading the wave reports of \(bundleID) (\(environment))", begin: Self.beginSnapshotRead
        ) { connection, logger in
            var reports: [WaveReportRecord] = []
            var query = PostgresQuery(
                unsafeSQL: Self.selectReports + """
                     WHERE a.bundle_id = $1 AND a.environment = $2 AND w.completed_at IS NOT NULL
                    ORDER BY w.id DESC LIMIT $3
                    """)
            query.binds.append(bundleID, context: .default)
            query.binds.append(Int16(environment.rawValue), context: .default)
            query.binds.append(Int64(limit), context: .default)
            for try await row in try await connection.query(query, logger: logger) {
                reports.append(try Self.report(row))
            }
            return reports
        }
    }

    public func latestTimestamps(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [String: Int64]
    {
        try channelValues(
            "reading the latest timestamps of \(bundleID) (\(environment))", table: "channel_latest",
            column: "timestamp", bundleID: bundleID, environment: environment)
    }

    public func pendingRetirements(
        bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError)
        -> [String: Int64]
    {
        try channelValues(
            "reading the pending retirements of \(bundleID) (\(environment))", table: "pending_retirements",
            column: "due_at", bundleID: bundleID, environment: environment)
    }

    public func lastWaveID() throws(RegistryError) -> UInt64 {
        try inTransaction("reading the last wave id", begin: Self.beginSnapshotRead) { connection, logger in
            var last: Int64 = 0
            for try await value in try await connection.query(
                """
                SELECT greatest(coalesce((SELECT max(id) FROM waves), 0),
                                coalesce((SELECT max(highest) FROM pruned_wave_ids), 0))
                """, logger: logger
            ).decode(Int64.self) {
                last = value
            }
            guard let id = UInt64(exactly: last) else {
                throw RegistryError.storage("the last wave id in the database is negative (\(last)); it is corrupt")
            }
            return id
        }
    }

    // MARK: - Helpers

    static let beginSnapshotRead = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

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

    private static func report(_ row: PostgresRow) throws -> WaveReportRecord {
        try WaveReportRecord(row: PostgresWaveColumns(row, name: PostgresWaveColumns.waveName))
    }

    /// Throws unless wave `id` is saved, for the report's app, channel, event, timestamp and publish time: a
    /// report of another wave under this id is the caller's mistake and must not overwrite it. Locks the row.
    private static func checkReportMatchesWave(
        _ report: WaveReportRecord, id: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        for try await row in try await connection.query(
            """
            SELECT w.id, a.bundle_id, a.environment, w.channel, w.event, w.timestamp, w.published_at
            FROM waves AS w LEFT JOIN apps AS a ON a.id = w.app_id WHERE w.id = \(id) FOR UPDATE OF w
            """, logger: logger)
        {
            let columns = PostgresWaveColumns(row, name: PostgresWaveColumns.waveName)
            var differences: [String] = []
            let bundleID = try columns.optionalText(1, "app (bundle id)")
            let environment = try columns.optionalInteger(2, "environment")
            if bundleID != report.bundleID || environment != Int64(report.environment.rawValue) {
                differences.append("app")
            }
            if try columns.text(3, "channel") != report.channel { differences.append("channel") }
            if try columns.text(4, "event") != report.event { differences.append("event") }
            if try columns.integer(5, "timestamp") != report.timestamp { differences.append("timestamp") }
            if try columns.integer(6, "published_at") != report.publishedAt { differences.append("publishedAt") }
            guard differences.isEmpty else {
                throw RegistryError.invalidWave(
                    id: report.id,
                    reason: "the report's \(differences.joined(separator: ", ")) differ from the saved wave's")
            }
            return
        }
        throw RegistryError.unknownWave(id: report.id)
    }

    /// `channel -> value` rows of one app from `table`.
    private func channelValues(
        _ operation: String, table: String, column: String, bundleID: String, environment: APNsEnvironment
    ) throws(RegistryError) -> [String: Int64] {
        try inTransaction(operation, begin: Self.beginSnapshotRead) { connection, logger in
            var values: [String: Int64] = [:]
            var query = PostgresQuery(
                unsafeSQL: """
                    SELECT t.channel, t.\(column) FROM \(table) AS t JOIN apps AS a ON a.id = t.app_id
                    WHERE a.bundle_id = $1 AND a.environment = $2
                    """)
            query.binds.append(bundleID, context: .default)
            query.binds.append(Int16(environment.rawValue), context: .default)
            for try await row in try await connection.query(query, logger: logger) {
                let columns = PostgresWaveColumns(row) { _ in "a row of \(table)" }
                values[try columns.text(0, "channel")] = try columns.integer(1, "value")
            }
            return values
        }
    }
}

extension PostgresTokenStore {
    /// Runs `body` in one transaction (`begin` opens it) on the connection, serialised with every other call;
    /// errors come out as `.storage` naming `operation` (a `RegistryError` thrown by `body` as is). A read-only
    /// snapshot (`beginSnapshotRead`) that meets a dropped connection runs again on a new one.
    @discardableResult
    func inTransaction<T: Sendable>(
        _ operation: String, begin: String = "BEGIN",
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) throws(RegistryError) -> T {
        let logger = self.logger
        return try serialised(operation, retry: begin == Self.beginSnapshotRead) { connection throws(RegistryError) in
            try run {
                try await Self.transaction(connection, logger, begin: begin) { try await body(connection, logger) }
            }
        }
    }

    /// `inTransaction` with the id of `app`'s row, created in the same transaction when missing (cached once
    /// committed: app rows are never deleted).
    @discardableResult
    func inTransaction<T: Sendable>(
        _ operation: String, app: AppKey,
        _ body: @escaping @Sendable (PostgresConnection, Logger, Int64) async throws -> T
    ) throws(RegistryError) -> T {
        let logger = self.logger
        return try serialised(operation) { connection throws(RegistryError) in
            let known = appIDs[app]
            let (appID, result) = try run { () async throws -> (Int64, T) in
                try await Self.transaction(connection, logger) {
                    let appID: Int64
                    if let known { appID = known } else { appID = try await Self.appID(app, connection, logger) }
                    return (appID, try await body(connection, logger, appID))
                }
            }
            appIDs[app] = appID
            return result
        }
    }
}

import FanfareCore
import FanfareStorage
import Logging
import NIOCore
import PostgresNIO

/// Several nodes on one database (`SharedWaveStore`, docs/deployment.md): publishes of an app are serialised
/// by an advisory lock, so wave ids are handed out and committed in id order and a node reading
/// `waves(after:)` never skips one; a notification on `fanfare_waves` wakes the other nodes' feeds.
extension PostgresTokenStore: SharedWaveStore {
    /// The channel nodes LISTEN on; the payload is the new wave's id.
    public static let waveChannel = "fanfare_waves"

    public func publishWave(_ record: WaveRecord, unfinishedLimit: Int) throws(SharedWaveError) -> UInt64 {
        var checked = record
        checked.id = 1  // validated as a wave with some id; the store picks the real one below
        do { _ = try WaveValidation.check(checked) } catch { throw .registry(error) }
        let app = AppKey(bundleID: record.bundleID, environment: record.environment)
        let outcome: Result<UInt64, SharedWaveError>
        do {
            outcome = try inTransaction("publishing a wave on channel '\(record.channel)'", app: app) {
                connection, logger, appID in
                // One publish of this app at a time until commit: ids commit in order, and the latest check holds.
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(Self.publishLockSpace), \(Int32(truncatingIfNeeded: appID)))",
                    logger: logger)
                for try await latest in try await connection.query(
                    "SELECT timestamp FROM channel_latest WHERE app_id = \(appID) AND channel = \(record.channel)",
                    logger: logger
                ).decode(Int64.self) where latest > record.timestamp {
                    return .failure(
                        .olderThanLatest(channel: record.channel, timestamp: record.timestamp, latest: latest))
                }
                // Under the same lock: two nodes cannot both take the last free place (`waves_unfinished` index).
                for try await unfinished in try await connection.query(
                    """
                    SELECT count(*) FROM (SELECT 1 FROM waves WHERE app_id = \(appID) AND completed_at IS NULL
                                          LIMIT \(Int64(max(0, unfinishedLimit)))) AS running
                    """, logger: logger
                ).decode(Int64.self) where unfinished >= unfinishedLimit {
                    return .failure(.tooManyUnfinishedWaves(limit: unfinishedLimit))
                }
                var id: Int64 = 1
                for try await last in try await connection.query(
                    """
                    SELECT greatest(coalesce((SELECT max(id) FROM waves), 0),
                                    coalesce((SELECT max(highest) FROM pruned_wave_ids), 0))
                    """, logger: logger
                ).decode(Int64.self) {
                    id = last + 1
                }
                try await Self.insertWave(record, id: id, appID: appID, connection, logger)
                try await connection.query(
                    """
                    INSERT INTO channel_latest (app_id, channel, timestamp) VALUES (\(appID), \(record.channel),
                        \(record.timestamp))
                    ON CONFLICT (app_id, channel) DO UPDATE
                    SET timestamp = greatest(channel_latest.timestamp, EXCLUDED.timestamp)
                    """, logger: logger)
                // Delivered at commit, to every listening node.
                try await connection.query("SELECT pg_notify(\(Self.waveChannel), \(String(id)))", logger: logger)
                return .success(UInt64(id))
            }
        } catch {
            throw .registry(error)
        }
        return try outcome.get()
    }

    public func waves(
        after id: UInt64, bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError)
        -> [WaveRecord]
    {
        guard let after = Int64(exactly: id), limit > 0 else { return [] }
        return try inTransaction("reading the waves after \(id)", begin: Self.beginSnapshotRead) { connection, logger in
            var records: [WaveRecord] = []
            for try await row in try await connection.query(
                """
                SELECT \(unescaped: Self.waveColumns)
                FROM waves AS w JOIN apps AS a ON a.id = w.app_id
                WHERE a.bundle_id = \(bundleID) AND a.environment = \(Int16(environment.rawValue)) AND w.id > \(after)
                ORDER BY w.id LIMIT \(Int64(limit))
                """, logger: logger)
            {
                records.append(try Self.waveRecord(row, bundleID: bundleID, environment: environment))
            }
            return records
        }
    }

    public func waveProgress(id: UInt64) throws(RegistryError) -> UnfinishedWave? {
        guard let rowID = Int64(exactly: id) else { return nil }
        return try inTransaction("reading the progress of wave \(id)", begin: Self.beginSnapshotRead) {
            connection, logger in
            try await Self.progress(rowID, lock: false, connection, logger)
        }
    }

    public func completeIfFinished(
        waveID: UInt64, summarize: (WaveRecord, [WaveCheckpoint]) -> WaveReportRecord?
    )
        throws(RegistryError) -> Bool
    {
        guard let rowID = Int64(exactly: waveID) else { throw .unknownWave(id: waveID) }
        // The wave row locked FOR UPDATE: of two nodes finishing their last parts at once, the second to get here
        // sees both final checkpoints (each committed its own before asking).
        let read = try inTransaction("checking whether wave \(waveID) is finished") { connection, logger in
            guard let progress = try await Self.progress(rowID, lock: true, connection, logger) else {
                return nil as (UnfinishedWave, Bool)?
            }
            return (progress, try await Self.isComplete(rowID, connection, logger))
        }
        guard let (progress, complete) = read else { throw .unknownWave(id: waveID) }
        if complete { return true }
        guard let report = summarize(progress.record, progress.checkpoints) else { return false }
        // Completing twice (two nodes) writes the same sums: completion replaces the report.
        try completeWave(report)
        return true
    }

    // MARK: - Inside

    /// The wave's row, with the registry's change-feed position at this moment (`WaveRecord.registryPosition`).
    private static func insertWave(
        _ record: WaveRecord, id: Int64, appID: Int64, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        let payload = ByteBuffer(bytes: record.payload)
        let startKeys = ByteBuffer(bytes: WaveColumnEncoding.startKeys(record.startKeys))
        let channelPayload = record.channelPayload.map { ByteBuffer(bytes: $0) }
        try await connection.query(
            """
            INSERT INTO waves (id, app_id, channel, event, timestamp, priority, has_alert, payload, fresh_until,
                               collapse_id, dismissal_date, published_at, shard_count, start_keys,
                               broadcast_channel_id, channel_payload, published_subscribers,
                               registry_position)
            VALUES (\(id), \(appID), \(record.channel), \(record.event), \(record.timestamp),
                \(record.priority),
                    \(record.hasAlert), \(payload), \(record.freshUntil), \(record.collapseID),
                        \(record.dismissalDate),
                    \(record.publishedAt), \(Int64(record.shardCount)), \(startKeys),
                        \(record.broadcastChannelID),
                    \(channelPayload), \(record.broadcastSubscribers.map(Int64.init)),
                    -- Every registration acknowledged before this publish: the change-feed log's lock
                    -- makes its positions visible in commit order, so nothing commits below this later.
                    (SELECT coalesce(max(seq), 0) FROM token_changes))
            """, logger: logger)
    }

    /// `pg_advisory_xact_lock(space, app)`: publishes of one app, one at a time.
    static let publishLockSpace: Int32 = 0x4641_4E46  // "FANF"

    static let waveColumns = """
        w.id, w.channel, w.event, w.timestamp, w.priority, w.has_alert, w.payload, w.fresh_until, w.collapse_id, \
        w.dismissal_date, w.published_at, w.shard_count, w.start_keys, w.broadcast_channel_id, w.channel_payload, \
        w.published_subscribers, w.registry_position
        """
    /// How many `waveColumns` there are: what a query selects after them starts here.
    static let waveColumnCount = 17

    static func waveRecord(_ row: PostgresRow, bundleID: String, environment: APNsEnvironment) throws -> WaveRecord {
        let columns = PostgresWaveColumns(row, name: PostgresWaveColumns.waveName)
        var record = try WaveRecord(row: columns, bundleID: bundleID, environment: environment)
        record.broadcastSubscribers = try columns.optionalInteger(15, "published_subscribers").map { Int($0) }
        record.registryPosition = try columns.optionalInteger(16, "registry_position")
        return record
    }

    private static func isComplete(_ id: Int64, _ connection: PostgresConnection, _ logger: Logger) async throws -> Bool
    {
        for try await completed in try await connection.query(
            "SELECT completed_at IS NOT NULL FROM waves WHERE id = \(id)", logger: logger
        ).decode(Bool.self) {
            return completed
        }
        return false
    }

    /// The wave (locked FOR UPDATE when `lock`) and its checkpoints; nil when unknown.
    private static func progress(
        _ id: Int64, lock: Bool, _ connection: PostgresConnection, _ logger: Logger
    ) async throws
        -> UnfinishedWave?
    {
        var found: UnfinishedWave?
        for try await row in try await connection.query(
            """
            SELECT \(unescaped: waveColumns), a.bundle_id, a.environment
            FROM waves AS w JOIN apps AS a ON a.id = w.app_id WHERE w.id = \(id)
                \(unescaped: lock ? "FOR UPDATE OF w" : "")
            """, logger: logger)
        {
            let columns = PostgresWaveColumns(row, name: PostgresWaveColumns.waveName)
            let record = try waveRecord(
                row, bundleID: try columns.text(Self.waveColumnCount, "bundle_id"),
                environment: try columns.environment(Self.waveColumnCount + 1))
            found = UnfinishedWave(record: record, checkpoints: [])
        }
        guard var wave = found else { return nil }
        for try await row in try await connection.query(
            "SELECT shard, data, saved_at FROM wave_checkpoints WHERE wave_id = \(id) ORDER BY shard", logger: logger)
        {
            let columns = PostgresWaveColumns(row) { "a checkpoint of " + PostgresWaveColumns.waveName($0) }
            wave.checkpoints.append(
                WaveCheckpoint(
                    waveID: wave.record.id, shard: try columns.count(0, "shard"), data: try columns.bytes(1, "data"),
                    savedAt: try columns.integer(2, "saved_at")))
        }
        return wave
    }
}

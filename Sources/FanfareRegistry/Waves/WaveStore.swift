import FanfareCore

/// What the engine persists so that a restart resumes unfinished waves (docs/fanout.md, "Durable waves").
/// Every call is durable when it returns.
public protocol WaveStore: AnyObject, Sendable {
    /// Persists a newly published wave (unfinished) and raises its channel's latest timestamp to
    /// `wave.timestamp` (never lowers it), in one transaction.
    func saveWave(_ wave: WaveRecord) throws(RegistryError)
    /// Inserts or replaces each (waveID, shard) checkpoint, all in one transaction. A checkpoint of a wave that
    /// is complete or unknown is ignored.
    func saveCheckpoints(_ checkpoints: [WaveCheckpoint]) throws(RegistryError)
    /// Marks the wave complete with its final report and deletes its checkpoints, in one transaction.
    func completeWave(_ report: WaveReportRecord) throws(RegistryError)
    /// Unfinished waves of one app, in id order, each with its checkpoints (sorted by shard).
    func unfinishedWaves(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [UnfinishedWave]
    /// The final report of a complete wave; nil if the wave is unknown or not complete.
    func waveReport(id: UInt64) throws(RegistryError) -> WaveReportRecord?
    /// The newest `limit` complete reports of one app, newest (highest id) first.
    func waveReports(bundleID: String, environment: APNsEnvironment, limit: Int) throws(RegistryError) -> [WaveReportRecord]
    /// The latest timestamp published per channel of one app.
    func latestTimestamps(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64]
    /// The highest wave id ever saved (any app); 0 if none. New ids continue after it.
    func lastWaveID() throws(RegistryError) -> UInt64
    /// Records (insert or replace) that `channel`'s update tokens retire at `dueAt` (UNIX s).
    func saveRetirement(bundleID: String, environment: APNsEnvironment, channel: String, dueAt: Int64) throws(RegistryError)
    /// Forgets pending retirements (after they were applied).
    func removeRetirements(bundleID: String, environment: APNsEnvironment, channels: [String]) throws(RegistryError)
    /// Pending retirements of one app: channel -> due (UNIX s).
    func pendingRetirements(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64]
    /// Deletes complete waves (reports) of every app beyond the newest `keeping` per app; returns how many.
    @discardableResult func pruneWaveReports(keeping: Int) throws(RegistryError) -> Int
}

/// A published wave as stored.
public struct WaveRecord: Sendable, Equatable {
    public var id: UInt64
    public var bundleID: String
    public var environment: APNsEnvironment
    public var channel: String
    /// LiveActivityEvent raw value: "start", "update", "end".
    public var event: String
    /// The update's timestamp (UNIX s).
    public var timestamp: Int64
    /// UpdatePriority raw value: "auto", "immediate", "normal".
    public var priority: String
    public var hasAlert: Bool
    /// The exact body every push of the wave carries.
    public var payload: [UInt8]
    /// UNIX s.
    public var freshUntil: Int64?
    public var collapseID: String?
    /// UNIX s.
    public var dismissalDate: Int64?
    /// UNIX ms.
    public var publishedAt: Int64
    public var shardCount: Int
    /// Per shard, where the wave's walk starts (engine-defined; may be empty).
    public var startKeys: [UInt64]

    public init(
        id: UInt64, bundleID: String, environment: APNsEnvironment, channel: String, event: String, timestamp: Int64,
        priority: String, hasAlert: Bool, payload: [UInt8], freshUntil: Int64?, collapseID: String?,
        dismissalDate: Int64?, publishedAt: Int64, shardCount: Int, startKeys: [UInt64]
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.channel = channel
        self.event = event
        self.timestamp = timestamp
        self.priority = priority
        self.hasAlert = hasAlert
        self.payload = payload
        self.freshUntil = freshUntil
        self.collapseID = collapseID
        self.dismissalDate = dismissalDate
        self.publishedAt = publishedAt
        self.shardCount = shardCount
        self.startKeys = startKeys
    }
}

/// One shard's progress in one wave. `data` is the engine's own encoding: the store keeps it opaque.
public struct WaveCheckpoint: Sendable, Equatable {
    public var waveID: UInt64
    public var shard: Int
    public var data: [UInt8]
    /// UNIX ms.
    public var savedAt: Int64

    public init(waveID: UInt64, shard: Int, data: [UInt8], savedAt: Int64) {
        self.waveID = waveID
        self.shard = shard
        self.data = data
        self.savedAt = savedAt
    }
}

public struct UnfinishedWave: Sendable, Equatable {
    public var record: WaveRecord
    public var checkpoints: [WaveCheckpoint]

    public init(record: WaveRecord, checkpoints: [WaveCheckpoint]) {
        self.record = record
        self.checkpoints = checkpoints
    }
}

/// A complete wave's final report as stored (the engine converts it to and from its `WaveReport`).
public struct WaveReportRecord: Sendable, Equatable {
    public var id: UInt64
    public var bundleID: String
    public var environment: APNsEnvironment
    public var channel: String
    public var event: String
    public var timestamp: Int64
    /// UNIX ms.
    public var publishedAt: Int64
    /// UNIX ms.
    public var completedAt: Int64
    public var targeted = 0
    public var sent = 0
    public var delivered = 0
    public var failed = 0
    public var superseded = 0
    public var downgraded = 0
    public var expired = 0
    public var invalidated = 0
    public var retried = 0
    public var possibleDuplicates = 0
    public var resentAfterRestart = 0
    public var restarts = 0
    public var failedByReason: [String: Int] = [:]
    /// ns.
    public var timeToFirstAck: UInt64?
    /// ns.
    public var makespan: UInt64?

    public init(
        id: UInt64, bundleID: String, environment: APNsEnvironment, channel: String, event: String, timestamp: Int64,
        publishedAt: Int64, completedAt: Int64
    ) {
        self.id = id
        self.bundleID = bundleID
        self.environment = environment
        self.channel = channel
        self.event = event
        self.timestamp = timestamp
        self.publishedAt = publishedAt
        self.completedAt = completedAt
    }
}

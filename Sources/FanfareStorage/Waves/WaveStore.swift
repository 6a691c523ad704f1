/// What the engine persists so that a restart resumes unfinished waves (docs/fanout.md, "Durable waves").
/// Every call is durable when it returns (SQLite: one transaction, synchronous = FULL).
///
/// Shaped for a shared server database as much as for the embedded file: every call is one transaction on
/// plain rows keyed by wave id or by (app, channel), and nothing relies on the caller holding state between
/// calls. `SQLiteTokenStore` implements it on the registry's own file (docs/fanout.md, "Durable waves: storage").
public protocol WaveStore: AnyObject, Sendable {
    /// Persists a newly published wave (unfinished) and raises its channel's latest timestamp to
    /// `wave.timestamp` (never lowers it), in one transaction.
    func saveWave(_ wave: WaveRecord) throws(RegistryError)
    /// One publish on an app that sends in several environments: a wave per environment (each on its own
    /// engine), saved in one transaction as `saveWave` saves one, and recorded as one publication whose id is the
    /// first wave's (`publicationParts`). All or nothing.
    func saveWaves(_ waves: [WaveRecord]) throws(RegistryError)
    /// The waves of the publication `id` names, its own id first (just `[id]` for a wave published alone, or
    /// unknown to the store).
    func publicationParts(of id: UInt64) throws(RegistryError) -> [UInt64]
    /// Inserts or replaces each (waveID, shard) checkpoint, all in one transaction (one fsync). A checkpoint of
    /// a wave that is complete or unknown is ignored (a late write after completion must not resurrect it).
    func saveCheckpoints(_ checkpoints: [WaveCheckpoint]) throws(RegistryError)
    /// Marks the wave complete with its final report and deletes its checkpoints, in one transaction.
    /// Unknown id: throws `RegistryError.unknownWave`.
    func completeWave(_ report: WaveReportRecord) throws(RegistryError)
    /// Unfinished waves of one app, in id order, each with its checkpoints (sorted by shard).
    func unfinishedWaves(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [UnfinishedWave]
    /// The final report of a complete wave; nil if the wave is unknown or not complete.
    func waveReport(id: UInt64) throws(RegistryError) -> WaveReportRecord?
    /// The newest `limit` complete reports of one app, newest (highest id) first.
    func waveReports(
        bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError)
        -> [WaveReportRecord]
    /// The latest timestamp published per channel of one app.
    func latestTimestamps(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64]
    /// The highest wave id ever saved (any app); 0 if none. New ids continue after it.
    func lastWaveID() throws(RegistryError) -> UInt64
    /// Records (insert or replace) that `channel`'s update tokens retire at `dueAt` (UNIX s).
    func saveRetirement(
        bundleID: String, environment: APNsEnvironment, channel: String, dueAt: Int64)
        throws(RegistryError)
    /// Forgets pending retirements (after they were applied).
    func removeRetirements(bundleID: String, environment: APNsEnvironment, channels: [String]) throws(RegistryError)
    /// Pending retirements of one app: channel -> due (UNIX s).
    func pendingRetirements(bundleID: String, environment: APNsEnvironment) throws(RegistryError) -> [String: Int64]
    /// Deletes complete waves (reports) of every app beyond the newest `keeping` per app; returns how many.
    @discardableResult func pruneWaveReports(keeping: Int) throws(RegistryError) -> Int
}

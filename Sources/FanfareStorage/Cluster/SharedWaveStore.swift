import FanfareCore

/// Wave storage shared by several engines (nodes) on one database (docs/deployment.md). Every node accepts
/// publishes; each shard's part of a wave is sent by the node holding that shard's lease, and the wave is
/// complete when every shard's part is.
///
/// What the engine relies on:
/// - Wave ids are given by the store and become visible in id order (`publishWave` serialises publishes of an
///   app), so a node that reads `waves(after:)` from its last id never skips one.
/// - Latest state wins across nodes: `publishWave` refuses a timestamp older than the channel's newest.
/// - Checkpoints are fenced: the store drops (and reports to the node) a checkpoint of a shard this node no
///   longer holds, so a stale node cannot overwrite newer progress.
public protocol SharedWaveStore: WaveStore {
    /// Saves a newly published wave with a store-assigned id (returned), after checking its timestamp against
    /// the channel's newest and that fewer than `unfinishedLimit` waves of the app are unfinished (every node
    /// starts every wave on its shards, whose wave slots are bounded); wakes the other nodes. `record.id` is
    /// ignored.
    func publishWave(_ record: WaveRecord, unfinishedLimit: Int) throws(SharedWaveError) -> UInt64

    /// Waves of one app with an id above `id`, in id order, at most `limit` (complete ones included: a node that
    /// missed a wave still learns its channel's newest timestamp).
    func waves(
        after id: UInt64, bundleID: String, environment: APNsEnvironment, limit: Int
    ) throws(RegistryError)
        -> [WaveRecord]

    /// A wave and the newest checkpoint of every shard that saved one (nil: unknown wave).
    func waveProgress(id: UInt64) throws(RegistryError) -> UnfinishedWave?

    /// With the wave locked against other nodes: hands `summarize` the wave and every shard's newest
    /// checkpoint; a report it returns (every shard finished) completes the wave in the same transaction. Returns
    /// whether the wave is complete now (also when another node completed it first). Unknown id: `.unknownWave`.
    func completeIfFinished(
        waveID: UInt64, summarize: (WaveRecord, [WaveCheckpoint]) -> WaveReportRecord?
    )
        throws(RegistryError) -> Bool
}

/// Why `SharedWaveStore.publishWave` refused a wave.
public enum SharedWaveError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The channel already has a newer update (published on any node).
    case olderThanLatest(channel: String, timestamp: Int64, latest: Int64)
    /// `limit` waves of the app are unfinished already (published on any node): back-pressure.
    case tooManyUnfinishedWaves(limit: Int)
    case registry(RegistryError)

    public var description: String {
        switch self {
        case .olderThanLatest(let channel, let timestamp, let latest):
            return "channel \(channel) already has an update with timestamp \(latest), newer than \(timestamp)"
        case .tooManyUnfinishedWaves(let limit):
            return "\(limit) waves of this app are still running on the cluster; publish again when some complete"
        case .registry(let error): return "\(error)"
        }
    }
}

/// A wave that was saved and not completed, with the last checkpoint of each shard that saved one.
public struct UnfinishedWave: Sendable, Equatable {
    public var record: WaveRecord
    /// Sorted by shard; shards that never checkpointed have none.
    public var checkpoints: [WaveCheckpoint]

    public init(record: WaveRecord, checkpoints: [WaveCheckpoint]) {
        self.record = record
        self.checkpoints = checkpoints
    }
}

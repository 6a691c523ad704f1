/// One shard's progress in one wave. `data` is the engine's own encoding: the store keeps it opaque.
public struct WaveCheckpoint: Sendable, Equatable {
    public var waveID: UInt64
    /// Not negative.
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

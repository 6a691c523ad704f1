import Synchronization

/// One round of asking every shard which channels it still uses, so the engine can forget the others and
/// reuse their ids.
///
/// The engine queues it to every shard under its control lock, with `sequence` taken from the same counter
/// that stamps every command naming a channel. Shard queues are FIFO, so when a shard answers it has applied
/// every command queued before the sweep; a channel no shard uses and no command named since `sequence` can
/// be forgotten (a later command naming it is still queued behind the sweep, so it is kept).
final class ChannelSweep: Sendable {
    let sequence: UInt64
    let answers: ShardAnswers
    /// Channel ids each shard still uses (members, a wave, busy members), merged as shards answer.
    private let used = Mutex<Set<UInt16>>([])

    init(sequence: UInt64, shards: Int) {
        self.sequence = sequence
        answers = ShardAnswers(shards: shards)
    }

    /// A shard's thread: the channels it still uses.
    func answer(used channels: [UInt16]) {
        used.withLock { $0.formUnion(channels) }
        answers.answered()
    }

    /// After every shard answered: the channels some shard still uses.
    var usedChannels: Set<UInt16> { used.withLock { $0 } }
}

import Synchronization

/// One question to every shard: how many live tokens follow some channels (per kind). Shards answer on their
/// own thread when they take the command, so the counts are what the next wave of each channel would target.
final class ChannelCensus: Sendable {
    let channels: [UInt16]
    let answers: ShardAnswers
    /// Per channel (in `channels` order): update tokens, push-to-start tokens. Added to by each shard.
    private let counts: Mutex<[(update: Int, pushToStart: Int)]>

    init(channels: [UInt16], shards: Int) {
        self.channels = channels
        answers = ShardAnswers(shards: shards)
        counts = Mutex(Array(repeating: (0, 0), count: channels.count))
    }

    /// A shard's thread: its live members of each channel's two audiences (in `channels` order).
    func answer(_ shardCounts: [(update: Int, pushToStart: Int)]) {
        counts.withLock { counts in
            for (position, count) in shardCounts.enumerated() where position < counts.count {
                counts[position].update += count.update
                counts[position].pushToStart += count.pushToStart
            }
        }
        answers.answered()
    }

    /// After every shard answered: per channel (in `channels` order), (update tokens, push-to-start tokens).
    var totals: [(update: Int, pushToStart: Int)] { counts.withLock { $0 } }
}

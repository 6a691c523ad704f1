import Synchronization

/// One question to every shard: how many live tokens follow a channel (per kind). Shards answer on their own
/// thread when they take the command, so the count is what the next wave of the channel would target.
final class ChannelCensus: Sendable {
    let channel: UInt16
    private let unanswered: Atomic<Int>
    private let updateTokens = Atomic<Int>(0)
    private let pushToStartTokens = Atomic<Int>(0)

    init(channel: UInt16, shards: Int) {
        self.channel = channel
        unanswered = Atomic(shards)
    }

    /// A shard's thread: its live members of the channel's two audiences.
    func answer(update: Int, pushToStart: Int) {
        updateTokens.add(update, ordering: .relaxed)
        pushToStartTokens.add(pushToStart, ordering: .relaxed)
        unanswered.subtract(1, ordering: .releasing)
    }

    var isAnswered: Bool { unanswered.load(ordering: .acquiring) == 0 }

    /// After every shard answered: (update tokens, push-to-start tokens).
    var counts: (update: Int, pushToStart: Int) {
        (updateTokens.load(ordering: .relaxed), pushToStartTokens.load(ordering: .relaxed))
    }
}

import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

/// A node hands one shard to another (rebalancing, docs/deployment.md): the shard sends no more wave pushes,
/// waits for the ones out to be answered, records every unfinished wave's progress in a last checkpoint and
/// waits for it to be durable; then it empties its tables (the node taking the shard resumes from that
/// checkpoint, and this node may take the shard again later, loading it afresh) and `done` is posted.
final class ShardRelease: Sendable {
    let done = ThreadSignal()
    private let finishedStorage = Atomic<Bool>(false)
    private let cancelledStorage = Atomic<Bool>(false)
    /// The last checkpoint is durable and the shard is empty.
    var finished: Bool { finishedStorage.load(ordering: .acquiring) }

    func finish() {
        finishedStorage.store(true, ordering: .releasing)
        done.post()
    }

    /// The engine gave up waiting: the shard stops where it is, and writes no more checkpoints.
    func cancel() { cancelledStorage.store(true, ordering: .releasing) }
    var cancelled: Bool { cancelledStorage.load(ordering: .acquiring) }
}

extension Shard {
    /// The `.release` command: stop wave pushes now (single pushes still go), finish at a later `service`.
    func beginRelease(_ request: ShardRelease) {
        guard releaseRequest == nil else { return }
        releaseRequest = request
        stoppingWaves = true
    }

    /// At the end of every `service` while releasing: once nothing is out or held for the breaker, the last
    /// checkpoint; once it is durable, the local wave views get this shard's part as handed over, the tables are
    /// emptied, and the request is finished.
    func continueRelease(now: UInt64) {
        guard let request = releaseRequest else { return }
        if request.cancelled {
            // Handed over from its last durable checkpoint: this shard's state here is stale for good (until the
            // node restarts), and its checkpoints would be fenced.
            releaseRequest = nil
            stale.store(true, ordering: .releasing)
            return
        }
        if !releaseCheckpointTaken {
            guard pushesOut == resultsBack, window.heldCount == 0 else { return }
            releaseGeneration = submitLastCheckpoint()
            releaseCheckpointTaken = true
        }
        if let checkpoints, checkpoints.durableGeneration(shard: index) < releaseGeneration { return }
        // This node's view of each unfinished wave no longer waits for this shard: the taker finishes its part,
        // and the wave completes in the shared store when every shard's part is finished there.
        for slot in waves.indices { waves[slot]?.update.wave.partHandedOver(index) }
        emptyTables()
        releaseRequest = nil
        releaseCheckpointTaken = false
        releaseGeneration = 0
        request.finish()
    }

    /// Every unfinished wave's progress, final (nothing of this shard goes out any more), handed to the writer;
    /// returns its generation (0 with nothing to write or no writer: nothing to wait for).
    private func submitLastCheckpoint() -> UInt64 {
        guard let checkpoints else { return 0 }
        let items = finalCheckpoints()
        guard !items.isEmpty else { return 0 }
        checkpointGeneration &+= 1
        checkpoints.submit(shard: index, generation: checkpointGeneration, items)
        return checkpointGeneration
    }

    /// As new: no token, channel, wave or waiting member (nothing is out, nothing held: the caller checked).
    /// Single pushes queued or in flight are kept, and the checkpoint generation keeps counting.
    private func emptyTables() {
        tokens.deallocate()
        tokens = TokenTable()
        tokenIndex = TokenSlotIndex()
        channelSets = ChannelSets()
        for audienceIndex in audiences.indices { audiences[audienceIndex].deallocate() }
        audiences = []
        waves = []
        waveOwners = []
        freeWaves = []
        activeAudiences = []
        nextActive = 0
        stalledAudiences = []
        broadcastLanes = BroadcastLanes()
        lanes =
            [DueLane(delay: 0), DueLane(delay: settings.minimumInterval)]
            + settings.retryDelays.map { DueLane(delay: $0) }
        stoppingWaves = false
        liveTokens.store(0, ordering: .relaxed)
    }
}

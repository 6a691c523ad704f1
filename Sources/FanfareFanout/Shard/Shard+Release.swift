import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

/// A node hands one shard to another (rebalancing, docs/deployment.md): the shard sends no more wave pushes,
/// waits for the ones out to be answered, records every unfinished wave's progress in a last checkpoint and
/// waits for it to be durable; then `done` is posted and the node may let the lease go. The taker resumes from
/// that checkpoint, so nothing is sent twice. The shard keeps its tables but takes no more work: a node does
/// not take a shard it handed over again until it restarts.
final class ShardRelease: Sendable {
    let done = ThreadSignal()
    private let finishedStorage = Atomic<Bool>(false)
    /// The last checkpoint is durable (false: the release is still running, or ended by its deadline).
    var finished: Bool { finishedStorage.load(ordering: .acquiring) }

    func finish() {
        finishedStorage.store(true, ordering: .releasing)
        done.post()
    }
}

extension Shard {
    /// The `.release` command: stop wave pushes now (single pushes still go), finish at a later `service`.
    func beginRelease(_ request: ShardRelease) {
        guard releaseRequest == nil, !released else { return }
        releaseRequest = request
        stoppingWaves = true
    }

    /// At the end of every `service` while releasing: once nothing is out, the last checkpoint; once it is
    /// durable, the local wave views get this shard's part as handed over, and the request is finished.
    func continueRelease(now: UInt64) {
        guard let request = releaseRequest else { return }
        if !releaseCheckpointTaken {
            guard pushesOut == resultsBack else { return }
            releaseGeneration = submitLastCheckpoint()
            releaseCheckpointTaken = true
        }
        if let checkpoints, checkpoints.durableGeneration(shard: index) < releaseGeneration { return }
        released = true
        releaseRequest = nil
        // This node's view of each unfinished wave no longer waits for this shard: the taker finishes its part,
        // and the wave completes in the shared store when every shard's part is finished there.
        for slot in waves.indices {
            waves[slot]?.update.wave.partHandedOver(index)
        }
        request.finish()
    }

    /// Every unfinished wave's progress, final (nothing of this shard goes out any more), handed to the writer;
    /// returns its generation (0 with nothing to write or no writer: nothing to wait for).
    private func submitLastCheckpoint() -> UInt64 {
        guard let checkpoints else { return 0 }
        var items: [WaveCheckpoint] = []
        let savedAt = Int64(time(nil)) * 1000
        for slot in waves.indices where waves[slot] != nil {
            items.append(
                WaveCheckpoint(
                    waveID: waves[slot]!.update.wave.id, shard: index, data: progress(of: slot, final: true).encoded(),
                    savedAt: savedAt))
        }
        guard !items.isEmpty else { return 0 }
        checkpointGeneration &+= 1
        checkpoints.submit(shard: index, generation: checkpointGeneration, items)
        return checkpointGeneration
    }
}

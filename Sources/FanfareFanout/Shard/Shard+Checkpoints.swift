import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Checkpoints (durable waves)

    /// Before the worker starts.
    func configureCheckpoints(_ writer: CheckpointWriter, _ configuration: CheckpointConfiguration) {
        checkpoints = writer
        checkpointWindow = configuration.window
        checkpointInterval = max(1_000_000, FanoutEngine.nanoseconds(configuration.interval))
        checkpointPushes = UInt64(configuration.pushes)
    }

    /// The cursor reached its permit: out of the round-robin until a durable checkpoint moves the permit.
    func stall(_ audienceIndex: Int) {
        audiences[audienceIndex].stalled = true
        if let position = activeAudiences.firstIndex(of: audienceIndex) {
            activeAudiences.swapAt(position, activeAudiences.count - 1)
            activeAudiences.removeLast()
        }
        stalledAudiences.append(audienceIndex)
        checkpointDue = true
    }

    /// Checkpoints up to generation `durable` are on disk: their permits apply.
    func applyPermits(durable: UInt64) {
        for audienceIndex in activeAudiences + stalledAudiences {
            let audience = audiences[audienceIndex]
            guard audience.proposedGeneration != 0, audience.proposedGeneration <= durable else { continue }
            audiences[audienceIndex].permit = max(audience.permit, audience.proposedPermit)
        }
        var still: [Int] = []
        for audienceIndex in stalledAudiences {
            guard audiences[audienceIndex].stalled, audiences[audienceIndex].cursorActive else { continue }
            if audiences[audienceIndex].visited < audiences[audienceIndex].permit {
                audiences[audienceIndex].stalled = false
                activeAudiences.append(audienceIndex)
            } else {
                still.append(audienceIndex)
            }
        }
        stalledAudiences = still
    }

    /// Records every unfinished wave's progress and hands it to the writer (not per push: every
    /// `interval` or `pushes`).
    func takeCheckpoint(now: UInt64) {
        checkpointDue = false
        nextCheckpointAt = now &+ checkpointInterval
        pushesAtCheckpoint = pushesOut
        // A shard being handed over writes its last checkpoint itself (`continueRelease`), and then none.
        guard let checkpoints, releaseRequest == nil, !stale.load(ordering: .relaxed) else { return }
        checkpointGeneration &+= 1
        var items: [WaveCheckpoint] = []
        let savedAt = Int64(time(nil)) * 1000
        for slot in waves.indices where waves[slot] != nil {
            let checkpoint = progress(of: slot)
            items.append(
                WaveCheckpoint(
                    waveID: waves[slot]!.update.wave.id, shard: index, data: checkpoint.encoded(), savedAt: savedAt))
        }
        guard !items.isEmpty else { return }
        checkpoints.submit(shard: index, generation: checkpointGeneration, items)
    }

    /// The wave is done on this shard: its last checkpoint says so (the store drops it once the wave completes).
    func finalCheckpoint(_ slot: Int) {
        guard let checkpoints, let wave = waves[slot] else { return }
        var checkpoint = ShardCheckpoint()
        checkpoint.finished = true
        checkpoint.rangeDone = true
        checkpoint.restarts = wave.update.wave.restarts
        (checkpoint.counters, checkpoint.failures, checkpoint.firstAck, checkpoint.lastAck) = wave.tally.snapshot(
            publishedAt: wave.update.wave.publishedAt)
        checkpoint.broadcast = broadcastSnapshot(slot)
        checkpointGeneration &+= 1
        checkpoints.submit(
            shard: index, generation: checkpointGeneration,
            [
                WaveCheckpoint(
                    waveID: wave.update.wave.id, shard: index, data: checkpoint.encoded(),
                    savedAt: Int64(time(nil)) * 1000)
            ])
    }

    /// One wave's progress on this shard now, and the permit it asks for. `final`: the shard sends nothing
    /// more (a graceful shutdown), so nothing past the cursor can have gone out after this.
    func progress(of slot: Int, final: Bool = false) -> ShardCheckpoint {
        let wave = waves[slot]!
        var checkpoint = ShardCheckpoint()
        checkpoint.restarts = wave.update.wave.restarts
        (checkpoint.counters, checkpoint.failures, checkpoint.firstAck, checkpoint.lastAck) = wave.tally.snapshot(
            publishedAt: wave.update.wave.publishedAt)
        checkpoint.broadcast = broadcastSnapshot(slot)
        let audienceIndex = Self.audienceIndex(wave.channel, wave.kind)
        guard audiences[audienceIndex].currentWave == UInt16(slot + 1) else {
            // A newer wave took the audience over: what is left of this one ends superseded at a restart.
            checkpoint.superseded = true
            checkpoint.rangeDone = true
            return checkpoint
        }
        let progress = WaveRecovery.progress(
            of: audiences[audienceIndex], tokens: tokens, window: checkpointWindow, final: final)
        audiences[audienceIndex].lowWater = progress.lowWater
        if let permit = progress.proposedPermit {
            audiences[audienceIndex].proposedPermit = permit
            audiences[audienceIndex].proposedGeneration = checkpointGeneration
        }
        checkpoint.pending = progress.pending
        checkpoint.rangeDone = progress.rangeDone
        checkpoint.from = progress.from
        checkpoint.to = progress.to
        checkpoint.highWater = progress.highWater
        return checkpoint
    }

    /// How a wave found unfinished at start-up goes on.
    enum ResumeMode: Sendable {
        /// Its remaining members get it (the newest state of their channel).
        case resume
        /// A newer wave of the channel exists: what is left ends superseded (the newer one delivers).
        case supersede
        /// Past `freshUntil`: what is left ends expired, unsent.
        case expire
    }

    /// Before the worker starts: picks up a wave from its checkpoint on this shard (nil: none was durable, so
    /// the wave starts over here, the first `window` members counted as possibly sent).
}

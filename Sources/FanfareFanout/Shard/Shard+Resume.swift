import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    func resume(_ update: PublishedUpdate, checkpoint: ShardCheckpoint?, mode: ResumeMode) {
        let tally = update.wave.tallies[index]
        let channel = Int(update.channel)
        ensureChannel(channel)
        let audienceIndex = Self.audienceIndex(channel, update.kind)
        precondition(update.sequence > audiences[audienceIndex].lastSequence, "resumed waves arrive in publish order")
        audiences[audienceIndex].lastSequence = update.sequence
        let part = update.wave.broadcast.flatMap { $0.shard == index ? $0 : nil }
        if let checkpoint, let state = checkpoint.broadcast { part?.restore(state) }
        if let checkpoint {
            tally.restore(checkpoint)
            let publishedAt = update.wave.publishedAt
            if checkpoint.firstAck != 0 { tally.firstAck.store(publishedAt &+ checkpoint.firstAck, ordering: .relaxed) }
            if checkpoint.lastAck != 0 { tally.lastAck.store(publishedAt &+ checkpoint.lastAck, ordering: .relaxed) }
        }
        if let checkpoint, checkpoint.finished {
            update.wave.shardFinished(index)
            return
        }
        if let part, part.outcome == .pending, checkpoint?.superseded == true || mode != .resume {
            // Nothing more of this wave goes out: a newer one carries the channel's state (or it is stale).
            part.finish(mode == .expire ? .expired : .superseded)
        }
        if let checkpoint, checkpoint.superseded {
            let left = max(0, checkpoint.counters.targeted - checkpoint.counters.accounted)
            tally.superseded.store(checkpoint.counters.superseded + left, ordering: .relaxed)
            update.wave.shardFinished(index)
            return
        }
        let counted = checkpoint?.counters.accounted ?? 0
        let (walk, missing) = resumedWalk(audienceIndex, checkpoint: checkpoint)
        switch mode {
        case .resume:
            // Pending members whose token is gone (invalidated or unregistered while down) end invalidated.
            if missing > 0 {
                tally.invalidated.store(tally.invalidated.load(ordering: .relaxed) + missing, ordering: .relaxed)
            }
            let permit = checkpoints == nil ? Int.max : walk.explicitPossiblySent
            // Without a checkpoint that says otherwise, the broadcast may have gone out before the restart.
            let broadcastPossiblySent = checkpoint?.broadcast?.possiblySent ?? true
            begin(
                update, audienceIndex: audienceIndex, walk: walk, permit: permit, counted: counted + missing,
                possiblySent: broadcastPossiblySent)
            checkpointDue = true
        case .supersede, .expire:
            let left = walk.count + missing
            if mode == .supersede {
                tally.superseded.store(tally.superseded.load(ordering: .relaxed) + left, ordering: .relaxed)
            } else {
                tally.expired.store(tally.expired.load(ordering: .relaxed) + left, ordering: .relaxed)
            }
            tally.targeted.store(counted + left, ordering: .relaxed)
            walk.deallocate()
            update.wave.shardFinished(index)
        }
    }

    /// The members a resumed wave still has to visit, and how many pending members are no longer here
    /// (`WaveRecovery.walk`, over the audience sorted now).
    func resumedWalk(_ audienceIndex: Int, checkpoint: ShardCheckpoint?) -> (WaveWalk, missing: Int) {
        let slots = audiences[audienceIndex].slots
        let sorted = walkSorter.sort(slots: slots, tokens: tokens)
        defer { walkSorter.releaseIfLarge() }
        return WaveRecovery.walk(
            resuming: checkpoint, sorted: sorted, slots: slots, tokens: tokens, everythingSent: checkpoints == nil,
            window: checkpointWindow)
    }
}

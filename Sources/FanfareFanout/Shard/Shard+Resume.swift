import FanfareClient
import FanfareCore
import FanfareIO
import FanfareRegistry
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
            if missing > 0 { tally.invalidated.store(tally.invalidated.load(ordering: .relaxed) + missing, ordering: .relaxed) }
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

    /// The members a resumed wave still has to visit: the checkpoint's pending ones (possibly sent first), then
    /// its key range. Also how many pending members are no longer here.
    func resumedWalk(_ audienceIndex: Int, checkpoint: ShardCheckpoint?) -> (WaveWalk, missing: Int) {
        let slots = audiences[audienceIndex].slots
        let sorted = walkSorter.sort(slots: slots, tokens: tokens)
        var walk = WaveWalk()
        let everythingSent = checkpoints == nil
        guard let checkpoint else {
            walk.appendRange(sorted, from: 0, count: sorted.count)
            walk.rangePossiblySent = everythingSent ? sorted.count : min(sorted.count, checkpointWindow == Int.max ? sorted.count : checkpointWindow)
            walkSorter.releaseIfLarge()
            return (walk, 0)
        }
        // The range still to visit, as positions of `sorted`.
        var rangeFirst = 0
        var rangeCount = 0
        var rangeSent = 0
        if !checkpoint.rangeDone && sorted.count > 0 {
            rangeFirst = WalkSorter.lowerBound(checkpoint.from, in: sorted, slots: slots, tokens: tokens)
            let end = WalkSorter.lowerBound(checkpoint.to, in: sorted, slots: slots, tokens: tokens)
            // Members from `from` up to `to`, wrapping past the end of the order when `to` comes before `from`.
            // Positions alone cannot tell "nothing left" from "everything left" when they coincide (a cursor
            // that had not moved yet: from = the first member's key, to = the origin): the keys' order can.
            func members(upTo position: Int, key: WalkKey) -> Int {
                if key == checkpoint.from { return 0 }
                if WalkKey.precedes(checkpoint.from, key) { return max(0, position - rangeFirst) }
                return sorted.count - rangeFirst + position
            }
            rangeCount = checkpoint.from == checkpoint.to ? sorted.count : members(upTo: end, key: checkpoint.to)
            if let high = checkpoint.highWater {
                let highPosition = WalkSorter.lowerBound(high, in: sorted, slots: slots, tokens: tokens)
                rangeSent = min(rangeCount, members(upTo: highPosition, key: high))
            } else {
                rangeSent = rangeCount
            }
        }
        func inRange(_ position: Int) -> Bool {
            rangeCount > 0 && (position - rangeFirst + sorted.count) % sorted.count < rangeCount
        }
        // Pending members, found by hash (a hash shared by two tokens brings both: one more push at most).
        var missing = 0
        var sentFirst: [UInt32] = []
        var others: [UInt32] = []
        var sentHashes: [UInt64] = []
        var otherHashes: [UInt64] = []
        for item in checkpoint.pending {
            var position = WalkSorter.lowerBound(WalkKey(hash: item.hash, token: nil), in: sorted, slots: slots, tokens: tokens)
            var found = false
            while position < sorted.count && sorted[position].hash == item.hash {
                found = true
                if !inRange(position) {
                    if item.possiblySent || everythingSent {
                        sentFirst.append(sorted[position].member)
                        sentHashes.append(item.hash)
                    } else {
                        others.append(sorted[position].member)
                        otherHashes.append(item.hash)
                    }
                }
                position += 1
            }
            if !found { missing += 1 }
        }
        for (member, hash) in zip(sentFirst + others, sentHashes + otherHashes) {
            walk.members.append(member)
            walk.hashes.append(hash)
        }
        walk.explicitCount = walk.members.count
        walk.explicitPossiblySent = sentFirst.count
        walk.appendRange(sorted, from: rangeFirst, count: rangeCount)
        walk.rangePossiblySent = everythingSent ? rangeCount : rangeSent
        walk.from = checkpoint.rangeDone ? checkpoint.to : checkpoint.from
        walk.to = checkpoint.to
        walkSorter.releaseIfLarge()
        return (walk, missing)
    }
}

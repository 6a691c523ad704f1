import FanfareCore

/// Durable waves' recovery as pure functions of an audience, its walk and a checkpoint (docs/fanout.md,
/// "Durable waves"): what a checkpoint records of a wave's progress, and what a resumed wave still has to visit.
/// The shard applies the results; nothing here changes state.
enum WaveRecovery {
    /// Where a wave stands in its audience, as a checkpoint records it.
    struct Progress {
        /// Members with an outcome still open before the cursor (or, in a resumed wave, named by the
        /// checkpoint it resumed from), and whether each may have had the push already.
        var pending: [ShardCheckpoint.Pending] = []
        /// The cursor visited everything (then `from`, `to` and `highWater` mean nothing).
        var rangeDone = false
        var from = WalkKey.origin
        var to = WalkKey.origin
        /// The key up to which pushes may go out before the next checkpoint (nil: the end of the walk).
        var highWater: WalkKey?
        /// Where the next scan for unsettled members may start (everything before it is settled).
        var lowWater: Int
        /// The cursor's permit this checkpoint asks for, once durable (nil: nothing left to permit).
        var proposedPermit: Int?
    }

    /// The progress of the audience's current wave. `window`: how far past the cursor a checkpoint lets pushes
    /// go; `final`: the shard sends nothing more (a graceful shutdown), so nothing past the cursor can go out.
    static func progress(of audience: Audience, tokens: TokenTable, window: Int, final: Bool) -> Progress {
        let walk = audience.walk
        let visited = audience.visited
        var progress = Progress(lowWater: audience.lowWater)
        func possiblySent(_ member: Int) -> Bool {
            audience.states[member] == .inFlight
                || audience.attempts[member] & (Shard.unconfirmedBit | Shard.restartBit) != 0
        }
        if audience.walkValid {
            var low = audience.lowWater
            while low < visited && audience.states[Int(walk.members[low])] == .idle { low += 1 }
            progress.lowWater = low
            for position in low..<visited {
                let member = Int(walk.members[position])
                if audience.states[member] != .idle {
                    progress.pending.append(.init(hash: walk.hashes[position], possiblySent: possiblySent(member)))
                }
            }
            // Past the cursor, pushes may go out up to the permit this checkpoint grants (none after a final one);
            // a resumed wave's range may also hold members an earlier run possibly sent.
            let alreadySent = walk.explicitCount + walk.rangePossiblySent
            let highPosition = min(walk.count, final ? max(visited, alreadySent) : max(visited, alreadySent) &+ window)
            if visited < walk.explicitCount {
                for position in visited..<walk.explicitCount {
                    let mayHaveGone = walk.possiblySent(position) || (!final && position < highPosition)
                    progress.pending.append(.init(hash: walk.hashes[position], possiblySent: mayHaveGone))
                }
            }
            if visited >= walk.count {
                progress.rangeDone = true
            } else {
                progress.from = audience.cursorKey(tokens: tokens)
                progress.to = walk.to
                progress.highWater =
                    highPosition >= walk.count ? nil : walk.key(at: highPosition, slots: audience.slots, tokens: tokens)
                progress.proposedPermit = highPosition
            }
        } else {
            // The cursor is done and compaction moved members: every busy member is one this wave still owes.
            progress.rangeDone = true
            for member in 0..<audience.count where audience.states[member] != .idle {
                progress.pending.append(
                    .init(hash: TokenHash.of(tokens.bytes(audience.slots[member])), possiblySent: possiblySent(member)))
            }
        }
        return progress
    }

    /// The members a resumed wave still has to visit: the checkpoint's pending ones (possibly sent first), then
    /// its key range; and how many pending members are no longer here. `sorted`: the audience in walk order now.
    /// Without a checkpoint the wave starts over, its first `window` members counted as possibly sent
    /// (`everythingSent`: no checkpoints at all, so every one of them may have been).
    static func walk(
        resuming checkpoint: ShardCheckpoint?, sorted: UnsafeMutableBufferPointer<WalkSorter.Entry>,
        slots: Column<UInt32>, tokens: TokenTable, everythingSent: Bool, window: Int
    ) -> (WaveWalk, missing: Int) {
        var walk = WaveWalk()
        guard let checkpoint else {
            walk.appendRange(sorted, from: 0, count: sorted.count)
            walk.rangePossiblySent =
                everythingSent ? sorted.count : min(sorted.count, window == Int.max ? sorted.count : window)
            return (walk, 0)
        }
        let range = remainingRange(of: checkpoint, sorted: sorted, slots: slots, tokens: tokens)
        let missing = appendPending(
            of: checkpoint, outside: range, sorted: sorted, slots: slots, tokens: tokens,
            everythingSent: everythingSent, to: &walk)
        walk.appendRange(sorted, from: range.first, count: range.count)
        walk.rangePossiblySent = everythingSent ? range.count : range.possiblySent
        walk.from = checkpoint.rangeDone ? checkpoint.to : checkpoint.from
        walk.to = checkpoint.to
        return (walk, missing)
    }

    /// The key range a resumed wave still has to visit, as positions of the audience sorted in walk order.
    private struct RemainingRange {
        var first = 0
        var count = 0
        /// Of those, how many a push may have gone to (the ones before the checkpoint's high-water key).
        var possiblySent = 0

        /// Whether the member at `position` of an audience of `total` lies in the range (which may wrap).
        @inline(__always)
        func contains(_ position: Int, total: Int) -> Bool {
            count > 0 && (position - first + total) % total < count
        }
    }

    /// The checkpoint's range from `from` up to `to`, in positions of `sorted` (empty when the range was done).
    @inline(__always)
    private static func remainingRange(
        of checkpoint: ShardCheckpoint, sorted: UnsafeMutableBufferPointer<WalkSorter.Entry>,
        slots: Column<UInt32>, tokens: TokenTable
    ) -> RemainingRange {
        guard !checkpoint.rangeDone && sorted.count > 0 else { return RemainingRange() }
        let first = WalkSorter.lowerBound(checkpoint.from, in: sorted, slots: slots, tokens: tokens)
        let end = WalkSorter.lowerBound(checkpoint.to, in: sorted, slots: slots, tokens: tokens)
        // Members from `from` up to `to`, wrapping past the end of the order when `to` comes before `from`.
        // Positions alone cannot tell "nothing left" from "everything left" when they coincide (a cursor
        // that had not moved yet: from = the first member's key, to = the origin): the keys' order can.
        func members(upTo position: Int, key: WalkKey) -> Int {
            if key == checkpoint.from { return 0 }
            if WalkKey.precedes(checkpoint.from, key) { return max(0, position - first) }
            return sorted.count - first + position
        }
        let count = checkpoint.from == checkpoint.to ? sorted.count : members(upTo: end, key: checkpoint.to)
        var possiblySent = count
        if let high = checkpoint.highWater {
            let highPosition = WalkSorter.lowerBound(high, in: sorted, slots: slots, tokens: tokens)
            possiblySent = min(count, members(upTo: highPosition, key: high))
        }
        return RemainingRange(first: first, count: count, possiblySent: possiblySent)
    }

    /// Appends the checkpoint's pending members that lie outside `range` to `walk`, the possibly sent ones first,
    /// and sets its explicit counts; returns how many pending members are no longer here. Members are found by
    /// hash (a hash shared by two tokens brings both: one more push at most).
    @inline(__always)
    private static func appendPending(
        of checkpoint: ShardCheckpoint, outside range: RemainingRange,
        sorted: UnsafeMutableBufferPointer<WalkSorter.Entry>, slots: Column<UInt32>, tokens: TokenTable,
        everythingSent: Bool, to walk: inout WaveWalk
    ) -> Int {
        var missing = 0
        var sentFirst: [UInt32] = []
        var others: [UInt32] = []
        var sentHashes: [UInt64] = []
        var otherHashes: [UInt64] = []
        for item in checkpoint.pending {
            var position = WalkSorter.lowerBound(
                WalkKey(hash: item.hash, token: nil), in: sorted, slots: slots, tokens: tokens)
            var found = false
            while position < sorted.count && sorted[position].hash == item.hash {
                found = true
                if !range.contains(position, total: sorted.count) {
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
        return missing
    }
}

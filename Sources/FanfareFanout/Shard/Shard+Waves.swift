import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Waves

    func start(_ update: PublishedUpdate) {
        let channel = Int(update.channel)
        ensureChannel(channel)
        let audienceIndex = Self.audienceIndex(channel, update.kind)
        precondition(
            update.sequence > audiences[audienceIndex].lastSequence, "updates of a channel arrived out of order")
        audiences[audienceIndex].lastSequence = update.sequence

        // The running wave, if any, stops here: its unvisited members get only the newer state, starting where
        // it had got to (the members that have gone longest without an update get the newest state first).
        var startKey = WalkKey.origin
        if audiences[audienceIndex].cursorActive {
            startKey = cursorKey(audienceIndex)
            finishRest(of: Int(audiences[audienceIndex].currentWave) - 1, as: .superseded)
        }
        // Dead members would only cost visits and hold token slots: drop them while no cursor walks the
        // audience (busy members keep their places).
        if worthCompacting(audienceIndex) { compact(audienceIndex) }

        let sorted = walkSorter.sort(slots: audiences[audienceIndex].slots, tokens: tokens)
        let first = WalkSorter.lowerBound(startKey, in: sorted, slots: audiences[audienceIndex].slots, tokens: tokens)
        var walk = audiences[audienceIndex].walk
        walk.reset()
        walk.appendRange(sorted, from: first, count: sorted.count)
        walk.from = startKey
        walk.to = startKey
        walkSorter.releaseIfLarge()
        // A superseding wave starts at a key only its first checkpoint records: nothing goes out before that
        // checkpoint is durable. A wave that starts at the origin may go `window` members ahead at once (a
        // restart without its checkpoint counts those as possibly sent).
        let permit = checkpoints == nil ? Int.max : (startKey == .origin ? checkpointWindow : 0)
        begin(update, audienceIndex: audienceIndex, walk: walk, permit: permit, counted: 0)
        if startKey != .origin { checkpointDue = true }
    }

    /// Starts a wave on this shard over `walk` (positions still to visit); `counted` members already have their
    /// outcome in the tally (a resumed wave's checkpoint).
    func begin(
        _ update: PublishedUpdate, audienceIndex: Int, walk: WaveWalk, permit: Int, counted: Int,
        possiblySent: Bool = false
    ) {
        let tally = update.wave.tallies[index]
        let remaining = walk.count
        tally.targeted.store(counted + remaining, ordering: .relaxed)
        let slot = allocateWaveSlot()
        waveOwners[slot] = update
        waves[slot] = ShardWave(
            update: update, tally: tally, channel: Int(update.channel), kind: update.kind,
            outstanding: remaining, unvisited: remaining, cursorDone: remaining == 0)
        if let part = update.wave.broadcast, part.shard == index, part.outcome == .pending {
            // The broadcast is one more outcome this shard owes the wave.
            waves[slot]!.outstanding += 1
            queueBroadcast(slot, channel: update.channel, possiblySent: possiblySent)
        }
        audiences[audienceIndex].walk = walk
        audiences[audienceIndex].walkValid = true
        audiences[audienceIndex].currentWave = UInt16(slot + 1)
        audiences[audienceIndex].visited = 0
        audiences[audienceIndex].lowWater = 0
        audiences[audienceIndex].permit = permit
        audiences[audienceIndex].proposedPermit = permit
        audiences[audienceIndex].proposedGeneration = 0
        audiences[audienceIndex].stalled = false
        if remaining > 0 {
            audiences[audienceIndex].cursorActive = true
            activeAudiences.append(audienceIndex)
        }
        settleIfDone(slot)
    }

    /// Where the audience's cursor is, as a key (`Audience.cursorKey`).
    func cursorKey(_ audienceIndex: Int) -> WalkKey { audiences[audienceIndex].cursorKey(tokens: tokens) }

    func allocateWaveSlot() -> Int {
        if let slot = freeWaves.popLast() { return slot }
        // The engine refuses a publish past `maximumUnfinishedWaves` (≤ waveSlotLimit) engine-wide.
        precondition(waves.count < FanoutConfiguration.waveSlotLimit, "more unfinished waves than the engine admits")
        waves.append(nil)
        waveOwners.append(nil)
        return waves.count - 1
    }

    func endCursor(_ audienceIndex: Int) {
        audiences[audienceIndex].cursorActive = false
        audiences[audienceIndex].stalled = false
        if let position = activeAudiences.firstIndex(of: audienceIndex) {
            activeAudiences.swapAt(position, activeAudiences.count - 1)
            activeAudiences.removeLast()
        }
    }

    /// How the members a wave's cursor has not reached end when the wave stops early.
    enum RestOutcome {
        /// A newer wave of the channel took over: they get its state instead.
        case superseded
        /// The wave's `freshUntil` passed: not worth showing any more.
        case expired
        /// The engine stopped (a `FailureReason` index).
        case failed(reason: Int)
    }

    /// Ends every member `slot`'s cursor has not reached yet, unsent, with `outcome`, and stops the cursor.
    func finishRest(of slot: Int, as outcome: RestOutcome) {
        let wave = waves[slot]!
        let rest = wave.unvisited
        switch outcome {
        case .superseded: wave.tally.superseded.add(rest, ordering: .relaxed)
        case .expired: wave.tally.expired.add(rest, ordering: .relaxed)
        case .failed(let reason): if rest > 0 { wave.tally.recordFailure(reason: reason, count: rest) }
        }
        waves[slot]!.unvisited = 0
        waves[slot]!.outstanding -= rest
        waves[slot]!.cursorDone = true
        let audienceIndex = Self.audienceIndex(wave.channel, wave.kind)
        if audiences[audienceIndex].currentWave == UInt16(slot + 1) && audiences[audienceIndex].cursorActive {
            endCursor(audienceIndex)
        }
        settleIfDone(slot)
    }

    /// One targeted member reached its outcome for `slot`'s wave.
    @inline(__always)
    func settle(_ slot: Int) {
        waves[slot]!.outstanding -= 1
        assert(waves[slot]!.outstanding >= 0, "a wave settled more members than it targeted")
        if waves[slot]!.outstanding == 0 { settleIfDone(slot) }
    }

    /// Finishes the wave if the cursor is done and every targeted member has its outcome.
    func settleIfDone(_ slot: Int) {
        guard let wave = waves[slot], wave.outstanding == 0, wave.cursorDone || wave.unvisited == 0 else { return }
        let audienceIndex = Self.audienceIndex(wave.channel, wave.kind)
        if checkpoints != nil { finalCheckpoint(slot) }
        if audiences[audienceIndex].currentWave == UInt16(slot + 1) {
            if audiences[audienceIndex].cursorActive { endCursor(audienceIndex) }
            audiences[audienceIndex].currentWave = 0
            audiences[audienceIndex].walk.reset()
            audiences[audienceIndex].walkValid = false
        }
        waves[slot] = nil
        freeWaves.append(slot)
        wave.update.wave.shardFinished(index)
        waveOwners[slot] = nil  // last: `wave`'s unowned references are used above
    }
}

import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Loading and registration

    /// Before the worker starts (one thread), or on the shard thread: adds or replaces one token.
    func register(_ entry: RegistrationBatch.Entry) {
        ownership.assertOwned("Shard")
        let set = channelSets.retain(entry.channels)
        var flags: TokenTable.Flags = []
        if entry.pushToStart { flags.insert(.pushToStart) }
        if entry.frequentUpdates { flags.insert(.frequentUpdates) }
        if entry.supportsBroadcast { flags.insert(.supportsBroadcast) }

        var carriedBudget: UInt32 = 0
        if let existing = tokenIndex.find(entry.token, in: tokens) {
            let slot = Int(existing)
            let sameShape =
                tokens.channelSet[slot] == set && tokens.flags[slot].contains(.pushToStart) == entry.pushToStart
            if sameShape {
                // Same channels and kind: refresh in place (the common re-registration).
                tokens.flags[slot] = flags.union(.alive)
                tokens.registeredAtSeconds[slot] = entry.registeredAtSeconds
                channelSets.release(set)
                return
            }
            // New channels or kind: retire the old slot (its memberships die with it), keep the budget.
            carriedBudget = tokens.budget[slot]
            remove(existing)
        }
        guard tokens.hasRoom(forTokenOf: entry.token.byteCount) else {
            // Reachable only past ~50 million 80-byte tokens in one shard: refuse this one, never trap.
            channelSets.release(set)
            registrationsRefused.add(1, ordering: .relaxed)
            return
        }
        let slot = tokens.insert(
            entry.token, flags: flags, registeredAtSeconds: entry.registeredAtSeconds, channelSet: set)
        tokens.budget[Int(slot)] = carriedBudget
        tokenIndex.insert(entry.token, slot: slot, in: tokens)
        let kind: Audience.Kind = entry.pushToStart ? .pushToStart : .update
        for channel in channelSets[set] {
            ensureChannel(Int(channel))
            audiences[Self.audienceIndex(Int(channel), kind)].append(slot: slot)
            tokens.addMembership(slot)
        }
    }

    /// Reserves room before a bulk load.
    func reserve(tokens count: Int) {
        precondition(tokens.aliveCount == 0, "reserve before the first token")
        tokens.reserve(count, tokenBytes: 80)
        tokenIndex = TokenSlotIndex(capacity: count)
    }

    /// Makes room for the audiences of `channel` (an engine channel id).
    func ensureChannel(_ channel: Int) {
        assert(channel < FanoutEngine.maximumChannels)
        while audiences.count <= 2 * channel + 1 { audiences.append(Audience()) }
    }

    @inline(__always)
    static func audienceIndex(_ channel: Int, _ kind: Audience.Kind) -> Int { channel << 1 | Int(kind.rawValue) }

    /// Removes a token: dead from now on (waves that targeted it count it as invalidated).
    func remove(_ slot: UInt32) {
        guard tokens.isAlive(slot) else { return }
        let token = tokens.token(slot)
        tokenIndex.remove(token, in: tokens)
        let kind: Audience.Kind = tokens.flags[Int(slot)].contains(.pushToStart) ? .pushToStart : .update
        for channel in channelSets[tokens.channelSet[Int(slot)]] {
            audiences[Self.audienceIndex(Int(channel), kind)].alive -= 1
        }
        if tokens.kill(slot) { slotFreed(slot) }
    }

    /// A dead slot no member points at any more went to the free list: its channel set is no longer used.
    func slotFreed(_ slot: UInt32) {
        channelSets.release(tokens.channelSet[Int(slot)])
        tokens.channelSet[Int(slot)] = 0
    }

    func unregister(_ token: DeviceToken) {
        if let slot = tokenIndex.find(token, in: tokens) { remove(slot) }
    }

    func retireChannel(_ channel: Int) {
        guard 2 * channel + 1 < audiences.count else { return }
        let audience = audiences[Self.audienceIndex(channel, .update)]
        for member in audience.slots.indices where tokens.isAlive(audience.slots[member]) {
            remove(audience.slots[member])
        }
    }

    /// Drops the members of dead tokens from one audience (not under a cursor) and frees their token slots
    /// once nothing points at them.
    func compact(_ audienceIndex: Int) {
        // Members move: a finished cursor's walk no longer names the right ones.
        audiences[audienceIndex].walk.reset()
        audiences[audienceIndex].walkValid = false
        let table = tokens  // views of the same columns: `isAlive` reads the live flags
        audiences[audienceIndex].compact(isAlive: { table.isAlive($0) }) { slot in
            if self.tokens.removeMembership(slot) { self.slotFreed(slot) }
        }
    }

    /// Whether an audience carries enough dead members to be worth a compaction pass.
    @inline(__always)
    func worthCompacting(_ audienceIndex: Int) -> Bool {
        let dead = audiences[audienceIndex].deadCount
        return dead > max(64, audiences[audienceIndex].count / 8)
    }

    /// Compacts what is worth it and reports the channels still in use, so the engine can forget the rest.
    func sweepChannels(_ sweep: ChannelSweep) {
        var used: [UInt16] = []
        for channel in 0..<audiences.count / 2 {
            var inUse = false
            for kind in [Audience.Kind.update, .pushToStart] {
                let audienceIndex = Self.audienceIndex(channel, kind)
                let audience = audiences[audienceIndex]
                if !audience.cursorActive && audience.deadCount > 0
                    && (audience.alive == 0 || worthCompacting(audienceIndex))
                {
                    compact(audienceIndex)
                }
                if audiences[audienceIndex].isEmpty {
                    // Give a grown audience's memory back; the channel id may name another channel next.
                    if audiences[audienceIndex].hasGrown {
                        audiences[audienceIndex].deallocate()
                        audiences[audienceIndex] = Audience()
                    }
                } else {
                    inUse = true
                }
            }
            if inUse { used.append(UInt16(channel)) }
        }
        // Trailing channels nothing uses: drop their audiences altogether.
        while audiences.count >= 2 && audiences[audiences.count - 1].isEmpty && audiences[audiences.count - 2].isEmpty {
            audiences[audiences.count - 1].deallocate()
            audiences[audiences.count - 2].deallocate()
            audiences.removeLast(2)
        }
        // An idle broadcast lane whose budget has fully recovered holds nothing worth keeping; otherwise its
        // channel stays in use, so the id (and with it the budget its subscribers spent) stays the same.
        let nowTenths = tenths(monotonicNow())
        for channel in broadcastLanes.forgetRecovered(nowTenths: nowTenths) where !used.contains(channel) {
            used.append(channel)
        }
        sweep.answer(used: used)
    }

    func countAudience(_ census: ChannelCensus) {
        census.answer(
            census.channels.map { id in
                let channel = Int(id)
                guard 2 * channel + 1 < audiences.count else { return (0, 0) }
                return (
                    audiences[Self.audienceIndex(channel, .update)].alive,
                    audiences[Self.audienceIndex(channel, .pushToStart)].alive
                )
            })
    }
}

import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Producing pushes

    func poll(now: UInt64) -> ProducerPoll {
        ProducerPoll { poll(now: now, into: $0) }
    }

    /// Writes the next push straight into the worker's stream slot (`job`, uninitialized until `.produced`).
    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        ownership.assertOwned("Shard")
        if nextReadySingle < readySingles.count {
            job.initialize(to: sendSingle(now: now))
            return .produced
        }
        // Several nodes: wave pushes go out only while this node's lease on the shard lasts (on its own
        // monotonic clock, which runs on through a SIGSTOP: a node resumed past its lease sends nothing).
        if now >= sendUntil.load(ordering: .relaxed) { return .wait(until: now &+ 20_000_000) }
        // The breaker is open: waves wait (the resume command kicks the worker). A graceful shutdown stops them.
        if paused || stoppingWaves { return .wait(until: now &+ (stoppingWaves ? 5_000_000 : 1_000_000_000)) }
        // A broadcast reaches a whole channel's subscribers in one request: it goes before members.
        if broadcastLanes.waitingCount > 0, let broadcast = nextBroadcast(now: now) {
            job.initialize(to: broadcast)
            return .produced
        }
        // Members whose back-off or interval ended come first: they have waited longest.
        for lane in lanes.indices {
            while let raw = lanes[lane].popDue(now: now) {
                if resumeWaiting(MemberRef(raw: raw), now: now, into: job) { return .produced }
            }
        }
        while !activeAudiences.isEmpty {
            if nextActive >= activeAudiences.count { nextActive = 0 }
            let audienceIndex = activeAudiences[nextActive]
            nextActive += 1
            if visitNext(audienceIndex, now: now, into: job) { return .produced }
        }
        var wake = now &+ 1_000_000_000
        for lane in lanes { if let due = lane.nextDue { wake = min(wake, due) } }
        if let due = broadcastLanes.nextDue { wake = min(wake, due) }
        return .wait(until: wake)
    }

    /// Moves the cursor of one audience by one member; writes a push into `job` (true) if that member gets one now.
    func visitNext(_ audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> Bool {
        let waveSlot = Int(audiences[audienceIndex].currentWave) - 1
        assert(waveSlot >= 0 && audiences[audienceIndex].cursorActive)
        let wave = waves[waveSlot]!
        if wave.update.deadline != 0 && now >= wave.update.deadline {
            // Too late to be worth showing: every member not reached yet expires here, unsent.
            finishRest(of: waveSlot, as: .expired)
            return false
        }
        let position = audiences[audienceIndex].visited
        if position >= audiences[audienceIndex].permit {
            // As far ahead of the last durable checkpoint as the window allows: wait for the next one.
            stall(audienceIndex)
            return false
        }
        let count = audiences[audienceIndex].walk.count
        let member = Int(audiences[audienceIndex].walk.members[position])
        audiences[audienceIndex].visited += 1
        if audiences[audienceIndex].visited == count {
            waves[waveSlot]!.cursorDone = true
            endCursor(audienceIndex)
        }
        if audiences[audienceIndex].walk.possiblySent(position) {
            // It may have got this state before a restart: a delivery now may be its second.
            audiences[audienceIndex].attempts[member] |= Self.restartBit | Self.unconfirmedBit
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        var produced = false
        if !tokens.isAlive(tokenSlot) {
            // The walk holds the members alive at the start: this one died during the wave.
            waves[waveSlot]!.unvisited -= 1
            WaveTally.bump(wave.tally.invalidated)
            settle(waveSlot)
        } else {
            waves[waveSlot]!.unvisited -= 1
            produced = deliver(waveSlot, to: member, of: audienceIndex, now: now, into: job)
        }
        if waves[waveSlot] != nil && waves[waveSlot]!.cursorDone { settleIfDone(waveSlot) }
        return produced
    }

    /// The wave reached a live member: send now, or make it owed if the member is busy or too recent.
    func deliver(
        _ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>
    ) -> Bool {
        switch audiences[audienceIndex].states[member] {
        case .inFlight, .waiting, .held:
            // It gets the newest state when its current push or back-off ends; an older owed state is dropped.
            let previous = Int(audiences[audienceIndex].owed[member]) - 1
            if previous >= 0 {
                WaveTally.bump(waves[previous]!.tally.superseded)
                settle(previous)
            }
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
            return false
        case .idle:
            assert(audiences[audienceIndex].owed[member] == 0, "an idle member owes nothing")
            if heldByInterval(audiences[audienceIndex].slots[member], now: now) {
                audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
                park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
                return false
            }
            send(waveSlot, to: member, of: audienceIndex, now: now, into: job)
            return true
        }
    }

    /// Whether the activity got a push less than the minimum interval ago.
    @inline(__always)
    func heldByInterval(_ tokenSlot: UInt32, now: UInt64) -> Bool {
        guard settings.minimumInterval != 0 else { return false }
        let last = tokens.lastSentAtDeciseconds[Int(tokenSlot)]
        let intervalTenths = UInt32(settings.minimumInterval / 100_000_000)
        return tenths(now) &- last < intervalTenths
    }

    func park(_ member: Int, of audienceIndex: Int, lane: Int, now: UInt64) {
        audiences[audienceIndex].startWaiting(member)
        let ref = MemberRef(
            channel: audienceIndex >> 1, kind: audienceIndex & 1 == 0 ? .update : .pushToStart, member: member)
        lanes[lane].push(ref.raw, at: now &+ lanes[lane].delay)
    }

    /// A member's wait ended: send what it is owed if that is still the newest state.
    func resumeWaiting(_ ref: MemberRef, now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> Bool {
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        audiences[audienceIndex].stopWaiting(member)
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
        guard owedSlot >= 0 else { return false }
        let wave = waves[owedSlot]!
        if audiences[audienceIndex].currentWave != UInt16(owedSlot + 1) {
            // A newer wave exists and has not reached this member yet (else it would be owed that one):
            // the member gets only the newer state, from that wave's cursor.
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.superseded)
            settle(owedSlot)
            return false
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        if !tokens.isAlive(tokenSlot) {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.invalidated)
            settle(owedSlot)
            return false
        }
        if wave.update.deadline != 0 && now >= wave.update.deadline {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.expired)
            settle(owedSlot)
            return false
        }
        if heldByInterval(tokenSlot, now: now) {
            park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
            return false
        }
        audiences[audienceIndex].owed[member] = 0
        send(owedSlot, to: member, of: audienceIndex, now: now, into: job)
        return true
    }

    /// Writes the push into `job` (the worker's stream slot): shared payload bytes, this token, the priority its
    /// budget allows.
    func send(
        _ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>
    ) {
        let wave = waves[waveSlot]!
        let update = wave.update
        let tokenSlot = Int(audiences[audienceIndex].slots[member])
        let nowTenths = tenths(now)
        var priority = PushPriority.normal
        if update.priority.wantsImmediate(hasAlert: update.hasAlert) {
            let budget = tokens.flags[tokenSlot].contains(.frequentUpdates) ? frequentBudget : standardBudget
            if budget.trySpend(&tokens.budget[tokenSlot], now: nowTenths) {
                priority = .immediate
            } else {
                WaveTally.bump(wave.tally.downgraded)
            }
        }
        tokens.lastSentAtDeciseconds[tokenSlot] = nowTenths
        pushesOut &+= 1
        WaveTally.bump(wave.tally.sent)
        if audiences[audienceIndex].attempts[member] & Self.restartBit != 0 {
            audiences[audienceIndex].attempts[member] &= ~Self.restartBit
            WaveTally.bump(wave.tally.resentAfterRestart)
        }
        audiences[audienceIndex].startSending(member)
        let ref = MemberRef(
            channel: audienceIndex >> 1, kind: audienceIndex & 1 == 0 ? .update : .pushToStart, member: member)
        let token = tokens.token(UInt32(tokenSlot))
        let payload: PushPayload
        if let channelPayload = update.channelPayload, tokens.flags[tokenSlot].contains(.supportsBroadcast) {
            payload = channelPayload
        } else {
            payload = update.payload
        }
        // The same id on every attempt, before and after a restart: a resend is recognisable as one.
        job.initialize(
            to: PushJob(
                token: token, payload: payload, priority: priority, expiration: update.expiration,
                collapseID: update.collapseID, apnsID: PushIdentifier.waveID(wave: update.wave.id, token: token),
                cookie: FanoutCookie.make(ref, wave: waveSlot)))
    }

    // MARK: - Single pushes
    func sendSingle(now: UInt64) -> PushJob {
        let single = readySingles[nextReadySingle]
        nextReadySingle += 1
        if nextReadySingle == readySingles.count {
            readySingles.removeAll(keepingCapacity: true)
            nextReadySingle = 0
        }
        let slot: Int
        if let free = freeSingleSlots.popLast() {
            slot = free
            singlesInFlight[slot] = single
        } else {
            slot = singlesInFlight.count
            singlesInFlight.append(single)
        }
        var job = single.job
        // A registered token's activity budget applies to single pushes too.
        if let tokenSlot = tokenIndex.find(job.token, in: tokens) {
            let index = Int(tokenSlot)
            if job.priority == .immediate {
                let budget = tokens.flags[index].contains(.frequentUpdates) ? frequentBudget : standardBudget
                if !budget.trySpend(&tokens.budget[index], now: tenths(now)) { job.priority = .normal }
            }
            tokens.lastSentAtDeciseconds[index] = tenths(now)
        }
        single.job.priority = job.priority
        job.cookie = FanoutCookie.single(slot)
        pushesOut &+= 1
        return job
    }

    func singleCompleted(_ result: PushResult) {
        let slot = FanoutCookie.member(result.cookie).member
        guard let single = singlesInFlight[slot] else {
            assertionFailure("a result for a single push that is not in flight")
            return
        }
        singlesInFlight[slot] = nil
        freeSingleSlots.append(slot)
        if result.disposition.action == .dropToken {
            if let (reason, timestamp) = suspect(result.disposition) {
                // The caller gets APNs' answer now; whether the token goes waits for the window's verdict.
                window.hold(BreakerWindow.HeldSingle(token: result.token, reason: reason, timestamp: timestamp))
                heldCount.store(window.heldCount, ordering: .relaxed)
            } else if let tokenSlot = tokenIndex.find(result.token, in: tokens) {
                let (reason, timestamp) = Self.rejection(result.disposition)
                invalidate(tokenSlot, reason: reason, timestamp: timestamp)
            }
        }
        var result = result
        result.cookie = single.job.cookie  // the caller's own
        single.completion(result)
    }
}

import FanfareClient
import FanfareCore

/// Broadcasts: a wave on a channel linked to an APNs broadcast channel owes one request, sent by one shard
/// through its channel's lane (`BroadcastLanes`): latest state wins there too, and one priority-10 budget stands
/// for every subscribed activity.
extension Shard {
    /// `slot`'s wave has a broadcast this shard sends: it waits in its channel's lane (replacing an older one
    /// still waiting there, which ends superseded).
    func queueBroadcast(_ slot: Int, channel: UInt16, possiblySent: Bool) {
        let older = broadcastLanes.modify(channel) { lane in
            let older = lane.waiting - 1
            lane.waiting = slot + 1
            lane.waitingPossiblySent = possiblySent
            lane.waitingUnanswered = false
            return older
        }
        if older >= 0 {
            waves[older]!.update.wave.broadcast!.finish(.superseded)
            settle(older)
        }
    }

    /// The first broadcast free to go now (none out on its channel, its back-off over), as a push.
    func nextBroadcast(now: UInt64) -> PushJob? {
        while let channel = broadcastLanes.due(now: now) {
            let slot = broadcastLanes.modify(channel) { lane in
                defer { lane.waiting = 0 }
                return lane.waiting - 1
            }
            let update = waves[slot]!.update
            let part = update.wave.broadcast!
            if update.deadline != 0 && now >= update.deadline {
                part.finish(.expired)
                broadcastLanes.modify(channel) { $0.attempt = 0 }
                settle(slot)
                continue
            }
            let wantsImmediate = update.priority.wantsImmediate(hasAlert: update.hasAlert)
            let nowTenths = tenths(now)
            let (priority, resent) = broadcastLanes.modify(channel) { lane in
                let spent = wantsImmediate && standardBudget.trySpend(&lane.budget, now: nowTenths)
                let resent = lane.waitingPossiblySent
                lane.waitingPossiblySent = false
                lane.inFlight = slot + 1
                lane.waitingUnanswered = false
                return (spent ? PushPriority.immediate : .normal, resent)
            }
            part.recordRequest(priority: priority, downgraded: wantsImmediate && priority != .immediate)
            if resent { part.markResent() }
            pushesOut &+= 1
            return PushJob(
                channel: part.channelID, payload: update.payload, priority: priority, expiration: part.expiration,
                apnsID: part.apnsID, cookie: FanoutCookie.broadcast(channel: Int(channel), wave: slot))
        }
        return nil
    }

    /// APNs answered a broadcast (or it failed): its outcome, a retry, or the newer broadcast waiting behind it.
    func broadcastCompleted(_ result: PushResult, waveSlot: Int, now: UInt64) {
        let channel = UInt16(FanoutCookie.broadcastChannel(result.cookie))
        guard broadcastLanes[channel]?.inFlight == waveSlot + 1, let wave = waves[waveSlot],
            let part = wave.update.wave.broadcast
        else {
            assertionFailure("a result for a broadcast that is not in flight")
            return
        }
        if case .failed = result.disposition {} else { wave.tally.recordAck(now: now) }
        let outcome = broadcastLanes.modify(channel) { lane in
            lane.inFlight = 0
            let outcome = broadcastOutcome(result.disposition, waveSlot: waveSlot, lane: &lane, now: now)
            if let (final, _) = outcome, final != .superseded {
                lane.attempt = 0
                lane.notBefore = 0
            }
            return outcome
        }
        if let (final, reason) = outcome {
            part.finish(final, reason: reason)
            settle(waveSlot)
        }
    }

    /// What an answer to `waveSlot`'s broadcast means for it: its outcome (and reason), or nil when it waits
    /// in `lane` again (a retry after a back-off, or a durable engine's graceful shutdown).
    private func broadcastOutcome(
        _ disposition: PushDisposition, waveSlot: Int, lane: inout BroadcastLane, now: UInt64
    ) -> (BroadcastOutcome, Int?)? {
        switch disposition.action {
        case .delivered:
            return (.delivered, nil)
        case .fixConfiguration, .discardMessage, .dropToken:
            return (.failed, FailureReason.index(of: disposition))
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            break
        }
        let reason = FailureReason.index(of: disposition)
        if case .failed(.shutdown) = disposition {
            if lane.waiting != 0 { return (.superseded, nil) }
            guard checkpoints != nil else { return (.failed, reason) }
            // A graceful shutdown of a durable engine: it waits for the next engine, possibly sent.
            lane.waiting = waveSlot + 1
            lane.waitingPossiblySent = true
            return nil
        }
        if case .failed(.unconfirmed) = disposition, !settings.retryUnconfirmed { return (.failed, reason) }
        if lane.attempt >= maxRetries { return (.failed, reason) }
        // Back off (APNs throttles broadcasts too, §7.5), then send the newest state: this one again, or the newer
        // one waiting behind it (then this one is superseded).
        lane.attempt += 1
        lane.notBefore = now &+ settings.retryDelays[lane.attempt - 1]
        if lane.waiting != 0 { return (.superseded, nil) }
        lane.waiting = waveSlot + 1
        if case .failed = disposition { lane.waitingUnanswered = true }
        return nil
    }

    /// What a checkpoint of `slot`'s wave records of its broadcast (nil: none, or another shard sends it).
    func broadcastSnapshot(_ slot: Int) -> ShardCheckpoint.Broadcast? {
        guard let update = waveOwners[slot], let part = update.wave.broadcast, part.shard == index else { return nil }
        let lane = broadcastLanes[update.channel]
        let inFlight = lane?.inFlight == slot + 1
        let unanswered = lane?.waiting == slot + 1 && (lane!.waitingUnanswered || lane!.waitingPossiblySent)
        return part.snapshot(possiblySent: inFlight || unanswered)
    }
}

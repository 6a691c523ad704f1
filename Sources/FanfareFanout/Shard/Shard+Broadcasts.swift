import FanfareClient
import FanfareCore
import FanfareIO
import FanfareRegistry
import Synchronization
import Glibc

extension Shard {
    // MARK: - Broadcasts

    /// `slot`'s wave has a broadcast this shard sends: it waits in its channel's lane (replacing an older one
    /// still waiting there, which ends superseded).
    func queueBroadcast(_ slot: Int, channel: UInt16, possiblySent: Bool) {
        var lane = broadcastLanes[channel] ?? BroadcastLane()
        if lane.waiting != 0 {
            let older = lane.waiting - 1
            waves[older]!.update.wave.broadcast!.finish(.superseded)
            settle(older)
        } else {
            broadcastsWaiting += 1
        }
        lane.waiting = slot + 1
        lane.waitingPossiblySent = possiblySent
        lane.waitingUnanswered = false
        broadcastLanes[channel] = lane
    }

    /// The first broadcast free to go now (none out on its channel, its back-off over), as a push.
    func nextBroadcast(now: UInt64) -> PushJob? {
        for (channel, lane) in broadcastLanes where lane.waiting != 0 && lane.inFlight == 0 && lane.notBefore <= now {
            let slot = lane.waiting - 1
            let wave = waves[slot]!
            let update = wave.update
            let part = update.wave.broadcast!
            broadcastLanes[channel]!.waiting = 0
            broadcastsWaiting -= 1
            if update.deadline != 0 && now >= update.deadline {
                part.finish(.expired)
                broadcastLanes[channel]!.attempt = 0
                settle(slot)
                continue
            }
            var priority = PushPriority.normal
            var downgraded = false
            let wantsImmediate: Bool
            switch update.priority {
            case .auto: wantsImmediate = update.hasAlert
            case .immediate: wantsImmediate = true
            case .normal: wantsImmediate = false
            }
            if wantsImmediate {
                if standardBudget.trySpend(&broadcastLanes[channel]!.budget, now: tenths(now)) {
                    priority = .immediate
                } else {
                    downgraded = true
                }
            }
            part.recordRequest(priority: priority, downgraded: downgraded)
            if broadcastLanes[channel]!.waitingPossiblySent {
                broadcastLanes[channel]!.waitingPossiblySent = false
                part.markResent()
            }
            broadcastLanes[channel]!.inFlight = slot + 1
            broadcastLanes[channel]!.waitingUnanswered = false
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
        guard var lane = broadcastLanes[channel], lane.inFlight == waveSlot + 1, let wave = waves[waveSlot],
            let part = wave.update.wave.broadcast
        else {
            assertionFailure("a result for a broadcast that is not in flight")
            return
        }
        lane.inFlight = 0
        if case .failed = result.disposition {} else { wave.tally.recordAck(now: now) }
        var outcome: (BroadcastOutcome, Int?)?
        switch result.disposition.action {
        case .delivered:
            outcome = (.delivered, nil)
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            let reason = FailureReason.index(of: result.disposition)
            if case .failed(.shutdown) = result.disposition {
                if checkpoints != nil && lane.waiting == 0 {
                    // A graceful shutdown of a durable engine: it waits for the next engine, possibly sent.
                    lane.waiting = waveSlot + 1
                    lane.waitingPossiblySent = true
                    broadcastsWaiting += 1
                } else {
                    outcome = lane.waiting != 0 ? (.superseded, nil) : (.failed, reason)
                }
            } else if case .failed(.unconfirmed) = result.disposition, !settings.retryUnconfirmed {
                outcome = (.failed, reason)
            } else if lane.attempt >= maxRetries {
                outcome = (.failed, reason)
            } else {
                // Back off (APNs throttles broadcasts too, §7.5), then send the newest state: this one again, or
                // the newer one waiting behind it (then this one is superseded).
                lane.attempt += 1
                lane.notBefore = now &+ settings.retryDelays[lane.attempt - 1]
                if lane.waiting != 0 {
                    outcome = (.superseded, nil)
                } else {
                    lane.waiting = waveSlot + 1
                    if case .failed = result.disposition { lane.waitingUnanswered = true }
                    broadcastsWaiting += 1
                }
            }
        case .fixConfiguration, .discardMessage, .dropToken:
            outcome = (.failed, FailureReason.index(of: result.disposition))
        }
        if let (final, reason) = outcome {
            if final != .superseded {
                lane.attempt = 0
                lane.notBefore = 0
            }
            broadcastLanes[channel] = lane
            part.finish(final, reason: reason)
            settle(waveSlot)
        } else {
            broadcastLanes[channel] = lane
        }
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

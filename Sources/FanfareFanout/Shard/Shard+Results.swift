import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - Results

    /// On the worker thread: the push for one member of one wave (or a single push) ended.
    func pushCompleted(_ result: PushResult, now: UInt64) {
        ownership.assertOwned("Shard")
        resultsBack &+= 1
        let waveSlot = FanoutCookie.wave(result.cookie)
        if FanoutCookie.isBroadcast(result.cookie) {
            broadcastCompleted(result, waveSlot: waveSlot, now: now)
        } else if waveSlot == FanoutCookie.singlePush {
            singleCompleted(result)
        } else {
            memberCompleted(
                cookie: result.cookie, disposition: result.disposition, possibleDuplicate: result.possibleDuplicate,
                waveSlot: waveSlot, now: now)
        }
        resultTaken(now: now)
    }

    /// The same, read in place from the client's stream slot: a wave member's result needs no `PushResult`.
    func pushCompleted(_ completion: borrowing PushCompletion, now: UInt64) {
        ownership.assertOwned("Shard")
        let cookie = completion.cookie
        let waveSlot = FanoutCookie.wave(cookie)
        guard !FanoutCookie.isBroadcast(cookie) && waveSlot != FanoutCookie.singlePush else {
            pushCompleted(completion.result, now: now)
            return
        }
        resultsBack &+= 1
        memberCompleted(
            cookie: cookie, disposition: completion.disposition, possibleDuplicate: completion.possibleDuplicate,
            waveSlot: waveSlot, now: now)
        resultTaken(now: now)
    }

    func resultTaken(now: UInt64) {
        if resultsBack == window.end { judgeWindow(now: now) } else { judgeWindowIfIdle(now: now) }
    }

    @inline(__always)
    func memberCompleted(
        cookie: UInt64, disposition: PushDisposition, possibleDuplicate: Bool, waveSlot: Int, now: UInt64
    ) {
        let ref = FanoutCookie.member(cookie)
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        audiences[audienceIndex].finishSending(member)
        let tally = waves[waveSlot]!.tally
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1

        if case .failed = disposition {} else { tally.recordAck(now: now) }
        switch disposition.action {
        case .delivered:
            WaveTally.bump(tally.delivered)
            // A delivery after an unconfirmed attempt of the same state (ours or the client's resend) may be
            // the second one the device sees.
            if audiences[audienceIndex].attempts[member] & Self.unconfirmedBit != 0 || possibleDuplicate {
                WaveTally.bump(tally.possibleDuplicates)
            }
            audiences[audienceIndex].attempts[member] = 0
            settle(waveSlot)
        case .dropToken:
            if let (reason, timestamp) = suspect(disposition) {
                // Maybe a configuration mistake, not a dead token: the outcome waits for the window's verdict.
                audiences[audienceIndex].hold(member)
                window.hold(BreakerWindow.HeldMember(ref: ref, wave: waveSlot, reason: reason, timestamp: timestamp))
                heldCount.store(window.heldCount, ordering: .relaxed)
                return
            }
            WaveTally.bump(tally.invalidated)
            settle(waveSlot)
            let (reason, timestamp) = Self.rejection(disposition)
            invalidate(audiences[audienceIndex].slots[member], reason: reason, timestamp: timestamp)
            audiences[audienceIndex].attempts[member] = 0
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                WaveTally.bump(waves[owedSlot]!.tally.invalidated)
                settle(owedSlot)
            }
            return
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            if case .failed(.unconfirmed) = disposition, !settings.retryUnconfirmed {
                // APNs may have it: by default not sent again (see `FanoutConfiguration.retryUnconfirmed`).
                failForGood(waveSlot, member: member, of: audienceIndex, reason: FailureReason.unconfirmed)
                break
            }
            retry(waveSlot, member: member, of: audienceIndex, disposition: disposition, now: now)
            return
        case .fixConfiguration, .discardMessage:
            failForGood(waveSlot, member: member, of: audienceIndex, reason: FailureReason.index(of: disposition))
        }
        // A newer state arrived while this push was out: send it next.
        if owedSlot >= 0 { park(member, of: audienceIndex, lane: Self.readyLane, now: now) }
    }

    func failForGood(_ waveSlot: Int, member: Int, of audienceIndex: Int, reason: Int) {
        waves[waveSlot]!.tally.recordFailure(reason: reason)
        audiences[audienceIndex].attempts[member] = 0
        settle(waveSlot)
    }

    /// `attempts` bit: an earlier attempt of the member's current state went out unconfirmed (it may have
    /// reached APNs); the low bits count retries.
    static let unconfirmedBit: UInt8 = 0x80
    /// `attempts` bit: the member may have got this wave's state before a restart; its next send counts in
    /// `resentAfterRestart` (once).
    static let restartBit: UInt8 = 0x40

    /// A transient failure: back off, then send the newest state (never a superseded one).
    func retry(_ waveSlot: Int, member: Int, of audienceIndex: Int, disposition: PushDisposition, now: UInt64) {
        let reason = FailureReason.index(of: disposition)
        if case .failed(.shutdown) = disposition, checkpoints != nil {
            // A graceful shutdown of a durable engine: the member stays owed (it may have got the push: the
            // next engine resends it as possibly sent).
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if owedSlot >= 0 {
                WaveTally.bump(waves[waveSlot]!.tally.superseded)
                settle(waveSlot)
            } else {
                audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
                audiences[audienceIndex].attempts[member] |= Self.unconfirmedBit
            }
            audiences[audienceIndex].startWaiting(member)
            return
        }
        if case .failed(.shutdown) = disposition {
            waves[waveSlot]!.tally.recordFailure(reason: reason)
            settle(waveSlot)
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            return
        }
        let previous = audiences[audienceIndex].attempts[member] & ~Self.restartBit
        let attempt = Int(previous & ~Self.unconfirmedBit) + 1
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
        if attempt > maxRetries {
            // Out of retries: this wave fails with the last reason, and so does a newer one it owes.
            audiences[audienceIndex].attempts[member] = 0
            waves[waveSlot]!.tally.recordFailure(reason: reason)
            settle(waveSlot)
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            return
        }
        if owedSlot >= 0 {
            // The retry carries the newer state; this wave's push is superseded for this member (and the newer
            // state has not been sent before: no duplicate to fear).
            audiences[audienceIndex].attempts[member] = UInt8(attempt)
            WaveTally.bump(waves[waveSlot]!.tally.superseded)
            settle(waveSlot)
        } else {
            var unconfirmed = previous & Self.unconfirmedBit
            if case .failed(.unconfirmed) = disposition { unconfirmed = Self.unconfirmedBit }
            audiences[audienceIndex].attempts[member] = UInt8(attempt) | unconfirmed
            WaveTally.bump(waves[waveSlot]!.tally.retried)
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
        }
        park(member, of: audienceIndex, lane: Self.firstRetryLane + attempt - 1, now: now)
    }

    func invalidate(_ tokenSlot: UInt32, reason: APNsReason?, timestamp: Int64?) {
        guard tokens.isAlive(tokenSlot) else { return }
        // A 410 older than the token's latest registration is stale news: the app registered it again since.
        if let timestamp, Int64(tokens.registeredAtSeconds[Int(tokenSlot)]) * 1000 > timestamp { return }
        let token = tokens.token(tokenSlot)
        remove(tokenSlot)
        invalidations.tokenInvalidated(token, reason: reason, invalidSince: timestamp)
    }

    /// The reason and timestamp of a rejection.
    static func rejection(_ disposition: PushDisposition) -> (APNsReason?, Int64?) {
        if case .rejected(_, let reason, _, _, let timestamp) = disposition { return (reason, timestamp) }
        return (nil, nil)
    }
}

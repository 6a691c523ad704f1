import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

extension Shard {
    // MARK: - The invalid-token breaker

    /// A BadDeviceToken / DeviceTokenNotForTopic answer, which the breaker judges before a token is pruned.
    @inline(__always)
    func suspect(_ disposition: PushDisposition) -> (APNsReason, Int64?)? {
        guard breaker.configuration.isEnabled, case .rejected(_, let reason?, _, _, let timestamp) = disposition,
            reason == .badDeviceToken || reason == .deviceTokenNotForTopic
        else { return nil }
        return (reason, timestamp)
    }

    /// Judges the window early when answers are held and the shard has nothing else coming: a small wave would
    /// otherwise wait for a thousand more results. Also once per loop iteration: the last result may have come
    /// while members still waited in a lane that then emptied without a send (superseded, expired, removed), and
    /// no result would ever come to judge what is held (the schedule driver found this: seed 535).
    func judgeWindowIfIdle(now: UInt64) {
        if window.heldCount != 0 && resultsBack == pushesOut && nothingToSend { judgeWindow(now: now) }
    }

    var nothingToSend: Bool {
        activeAudiences.isEmpty && nextReadySingle == readySingles.count && lanes.allSatisfy(\.isEmpty)
            && broadcastLanes.waitingCount == 0
    }

    func startWindow() {
        window.restart(at: resultsBack, size: breaker.configuration.window)
    }

    /// The window ended: an abnormal share of bad-token answers opens the breaker (and nothing is pruned);
    /// otherwise the held tokens are pruned as dead.
    func judgeWindow(now: UInt64) {
        defer { startWindow() }
        guard !paused else { return }
        let results = window.results(upTo: resultsBack)
        if window.isAbnormal(results: results, breaker.configuration) {
            paused = true
            breaker.open(
                shard: index, results: results, badDeviceToken: window.badDeviceToken,
                deviceTokenNotForTopic: window.deviceTokenNotForTopic)
        } else if breaker.isOpen {
            paused = true  // another shard opened it this very iteration: keep what is held
        } else if window.heldCount > 0 {
            releaseHeld(prune: true, resend: false, now: now)
        }
    }

    /// The operator closed the breaker: settle what is held and let the waves go on.
    func resumeAfterBreaker(pruneHeldTokens: Bool, now: UInt64) {
        paused = false
        releaseHeld(prune: pruneHeldTokens, resend: true, now: now)
        startWindow()
    }

    /// Gives every held answer its outcome. `prune`: the tokens are dead (invalidated, removed, reported to
    /// the registry). Otherwise they stay: the wave counts a failure with APNs' reason, and with `resend` a
    /// member owed a newer state gets it.
    func releaseHeld(prune: Bool, resend: Bool, now: UInt64) {
        for held in window.heldMembers {
            let audienceIndex = Self.audienceIndex(held.ref.channel, held.ref.kind)
            let member = held.ref.member
            audiences[audienceIndex].release(member)
            audiences[audienceIndex].attempts[member] = 0
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if prune {
                WaveTally.bump(waves[held.wave]!.tally.invalidated)
                settle(held.wave)
                invalidate(audiences[audienceIndex].slots[member], reason: held.reason, timestamp: held.timestamp)
                if owedSlot >= 0 {
                    audiences[audienceIndex].owed[member] = 0
                    WaveTally.bump(waves[owedSlot]!.tally.invalidated)
                    settle(owedSlot)
                }
            } else {
                waves[held.wave]!.tally.recordFailure(reason: FailureReason.index(of: held.reason))
                settle(held.wave)
                if owedSlot >= 0 && resend { park(member, of: audienceIndex, lane: Self.readyLane, now: now) }
            }
        }
        if prune {
            for held in window.heldSingles {
                if let slot = tokenIndex.find(held.token, in: tokens) {
                    invalidate(slot, reason: held.reason, timestamp: held.timestamp)
                }
            }
        }
        window.clearHeld()
        heldCount.store(0, ordering: .relaxed)
    }
}

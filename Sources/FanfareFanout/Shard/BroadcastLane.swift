/// One channel's broadcasts on the shard that sends them: the newest waiting to go, the one out, and the
/// channel's priority-10 budget. Wave slots are stored + 1 (0: none).
///
/// Latest state wins on this path too: a newer wave's broadcast replaces one still waiting (that one ends
/// superseded); one already out is answered first, then the newer goes.
struct BroadcastLane {
    var waiting = 0
    var inFlight = 0
    /// Monotonic ns before which the waiting broadcast does not go (a retry's back-off).
    var notBefore: UInt64 = 0
    /// Retries of the current state so far.
    var attempt = 0
    /// The waiting broadcast may have reached APNs before a restart (its next request counts as a resend).
    var waitingPossiblySent = false
    /// The waiting broadcast's last request got no answer (the connection ended, the deadline passed): APNs may
    /// have it. A checkpoint records it as possibly sent.
    var waitingUnanswered = false
    /// GCRA state of the channel's priority-10 budget. Every subscribed activity receives every broadcast of the
    /// channel, so one budget stands for all of them: a broadcast at 10 spends it once for every activity.
    var budget: UInt32 = 0

    var isIdle: Bool { waiting == 0 && inFlight == 0 }
}

/// Every broadcast lane of one shard, by engine channel id. Changes go through `modify`, which keeps
/// `waitingCount`: the lanes with a broadcast waiting (poll looks at the lanes only when there is one).
struct BroadcastLanes {
    private(set) var byChannel: [UInt16: BroadcastLane] = [:]
    private(set) var waitingCount = 0

    subscript(channel: UInt16) -> BroadcastLane? { byChannel[channel] }

    /// Changes one channel's lane (a new one if it has none) and returns what `change` returns.
    @discardableResult
    mutating func modify<Result>(_ channel: UInt16, _ change: (inout BroadcastLane) -> Result) -> Result {
        var lane = byChannel[channel] ?? BroadcastLane()
        let wasWaiting = lane.waiting != 0
        let result = change(&lane)
        waitingCount += (lane.waiting != 0 ? 1 : 0) - (wasWaiting ? 1 : 0)
        byChannel[channel] = lane
        return result
    }

    /// A channel whose waiting broadcast may go now: none out on it, its back-off over.
    func due(now: UInt64) -> UInt16? {
        guard waitingCount > 0 else { return nil }
        for (channel, lane) in byChannel where lane.waiting != 0 && lane.inFlight == 0 && lane.notBefore <= now {
            return channel
        }
        return nil
    }

    /// The earliest moment a waiting broadcast may go (nil: none waits, or each has one out already).
    var nextDue: UInt64? {
        guard waitingCount > 0 else { return nil }
        var earliest: UInt64?
        for lane in byChannel.values where lane.waiting != 0 && lane.inFlight == 0 {
            earliest = min(earliest ?? .max, lane.notBefore)
        }
        return earliest
    }

    /// Channels with a broadcast waiting.
    var waitingChannels: [UInt16] { byChannel.compactMap { $0.value.waiting != 0 ? $0.key : nil } }

    /// Forgets the idle lanes whose budget has fully recovered by `nowTenths` (they hold nothing worth keeping)
    /// and returns the channels of the lanes kept.
    mutating func forgetRecovered(nowTenths: UInt32) -> [UInt16] {
        var kept: [UInt16] = []
        for (channel, lane) in byChannel {
            if lane.isIdle && lane.budget <= nowTenths { byChannel[channel] = nil } else { kept.append(channel) }
        }
        return kept
    }
}

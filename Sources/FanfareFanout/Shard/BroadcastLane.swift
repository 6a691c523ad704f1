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

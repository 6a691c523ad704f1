import FanfareCore

/// One shard's side of the invalid-token breaker (see `InvalidTokenBreakerConfiguration`). Results are judged in
/// windows; a BadDeviceToken / DeviceTokenNotForTopic answer is held here until its window is judged normal (its
/// token is pruned) or the breaker opens (nothing is pruned). Counts are of the shard's results taken back.
struct BreakerWindow {
    struct HeldMember {
        var ref: MemberRef
        var wave: Int
        var reason: APNsReason
        var timestamp: Int64?
    }

    struct HeldSingle {
        var token: DeviceToken
        var reason: APNsReason
        var timestamp: Int64?
    }

    /// The current window: results from `start` up to `end`.
    private(set) var start: UInt64 = 0
    private(set) var end: UInt64 = 0
    private(set) var badDeviceToken = 0
    private(set) var deviceTokenNotForTopic = 0
    private(set) var heldMembers: [HeldMember] = []
    private(set) var heldSingles: [HeldSingle] = []

    /// Answers waiting for a verdict.
    var heldCount: Int { heldMembers.count + heldSingles.count }

    /// A new window of `size` results, from `results` on.
    mutating func restart(at results: UInt64, size: Int) {
        start = results
        end = results &+ UInt64(size)
        badDeviceToken = 0
        deviceTokenNotForTopic = 0
    }

    mutating func hold(_ member: HeldMember) {
        count(member.reason)
        heldMembers.append(member)
    }

    mutating func hold(_ single: HeldSingle) {
        count(single.reason)
        heldSingles.append(single)
    }

    private mutating func count(_ reason: APNsReason) {
        if reason == .badDeviceToken { badDeviceToken += 1 } else { deviceTokenNotForTopic += 1 }
    }

    /// Results in the window so far, when the shard has taken back `results` in all.
    func results(upTo results: UInt64) -> Int { Int(results &- start) }

    /// Whether the window's share of bad-token answers is abnormal: enough of them, and more than the share
    /// the configuration tolerates.
    func isAbnormal(results: Int, _ configuration: InvalidTokenBreakerConfiguration) -> Bool {
        let suspects = badDeviceToken + deviceTokenNotForTopic
        return suspects >= configuration.minimumSuspects
            && Double(suspects) > configuration.maximumShare * Double(results)
    }

    /// Forgets what was held (its outcomes given); keeps the lists' memory unless they grew large.
    mutating func clearHeld() {
        heldMembers.removeAll(keepingCapacity: heldMembers.capacity <= 4096)
        heldSingles.removeAll(keepingCapacity: heldSingles.capacity <= 4096)
    }
}

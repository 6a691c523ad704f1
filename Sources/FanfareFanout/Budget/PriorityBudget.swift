/// The priority-10 allowance of one activity: how many immediate pushes per hour, and how many may go
/// back to back. Apple publishes no numbers (apns-spec.md §4); the defaults are community observations.
public struct PriorityBudgetProfile: Sendable, Equatable {
    /// Sustained priority-10 pushes per hour.
    public var perHour: Double
    /// How many may be spent at once after a quiet spell (the bucket size).
    public var burst: Int

    /// Values that cannot work (a rate that is not positive, a burst below one) are refused when the engine
    /// starts (`FanoutError.invalidConfiguration`).
    public init(perHour: Double, burst: Int) {
        self.perHour = perHour
        self.burst = burst
    }

    /// What is wrong with this profile, or nil.
    var problem: String? {
        if !(perHour > 0 && perHour.isFinite) { return "perHour must be a positive number (got \(perHour))" }
        if perHour > 36_000 { return "perHour must be at most 36000 (one every 0.1 s, the budget's resolution)" }
        if burst < 1 || burst > 1024 { return "burst must be in 1...1024 (got \(burst))" }
        return nil
    }

    /// Activities without frequent updates: about 12–15 high-priority pushes an hour before iOS throttles
    /// (community-observed, apns-spec.md §4 [C17]). We spend 12 an hour, at most 4 in a row.
    public static let standard = PriorityBudgetProfile(perHour: 12, burst: 4)
    /// Activities whose app reported `frequentPushesEnabled`: "sub-minute" updates (community-observed);
    /// one a minute sustained (60 an hour), up to 10 in a row.
    public static let frequent = PriorityBudgetProfile(perHour: 60, burst: 10)
}

/// Token-bucket arithmetic for many activities at 4 bytes each (a GCRA: one "theoretical arrival time" per
/// activity instead of a level and a timestamp). Times are deciseconds on the shard's clock.
///
/// A push may go at priority 10 when `tat - now <= (burst - 1) × interval`; spending it moves `tat` to
/// `max(tat, now) + interval`. A fresh activity (`tat == 0`) has its whole burst.
struct PriorityBudget {
    /// Deciseconds between pushes at the sustained rate.
    let interval: UInt32
    /// How far ahead of `now` the arrival time may run: `(burst - 1) × interval`.
    let tolerance: UInt32

    init(_ profile: PriorityBudgetProfile) {
        assert(profile.problem == nil, "an unchecked budget profile")
        let interval = max(1, (36_000 / profile.perHour).rounded())
        self.interval = UInt32(min(interval, Double(UInt32.max / 1024)))
        tolerance = self.interval * UInt32(min(profile.burst - 1, 1023))
    }

    /// Spends one priority-10 push if the budget allows; returns whether it did. `tat` is the activity's state.
    @inline(__always)
    func trySpend(_ tat: inout UInt32, now: UInt32) -> Bool {
        let start = max(tat, now)
        guard start - now <= tolerance else { return false }
        tat = start &+ interval
        return true
    }
}

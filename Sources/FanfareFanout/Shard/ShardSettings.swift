import FanfareCore

/// What every shard needs from the engine configuration, in the units the shard works in.
struct ShardSettings: Sendable {
    var standardBudget: PriorityBudgetProfile
    var frequentBudget: PriorityBudgetProfile
    /// Minimum time between two pushes to one activity (ns); 0 turns it off.
    var minimumInterval: UInt64
    /// Back-off before retry `n` (ns), `n` in `1...retryDelays.count`; its count is the retry limit.
    var retryDelays: [UInt64]
    /// Control commands taken per worker loop iteration (keeps one burst of registrations from stalling sends).
    var commandsPerTick: Int = 256
    /// Time (ns) a loop iteration spends on control commands before it goes back to its streams (it always takes
    /// one): a flood of publishes, each sorting its audience, otherwise held single pushes and sends for seconds.
    var controlWorkPerTick: UInt64 = 2_000_000
    /// Retry `PushFailure.unconfirmed` through the retry lanes (else it fails with reason Unconfirmed).
    var retryUnconfirmed = false
}

/// Where a shard reports tokens APNs called dead; called on the shard's thread, must not block.
protocol InvalidationSink: AnyObject, Sendable {
    func tokenInvalidated(_ token: DeviceToken, reason: APNsReason?, invalidSince: Int64?)
}

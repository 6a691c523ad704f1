/// How often the engine records each running wave's progress in its `WaveStore`, and how far a shard may run
/// ahead of what is recorded (docs/fanout.md, "Durable waves").
///
/// A shard takes a checkpoint of its waves every `interval` or every `pushes` pushes, whichever comes first;
/// a background thread writes them (one transaction per batch). A shard never sends a wave's push more than
/// `window` members past the wave's last *durable* checkpoint, so a crash resends at most `window` members per
/// shard and wave plus the pushes that were in flight. If the store stops taking checkpoints (a full disk),
/// waves stall at the window instead of running ahead of what a restart would know.
public struct CheckpointConfiguration: Sendable, Equatable {
    /// false: waves are still saved at publish and their final reports at completion, but no progress is
    /// recorded: a restart sends an unfinished wave again from the start (every push counts as resent).
    public var isEnabled = true
    public var interval: Duration = .milliseconds(100)
    public var pushes = 10_000
    public var window = 25_000

    public init(
        isEnabled: Bool = true, interval: Duration = .milliseconds(100), pushes: Int = 10_000, window: Int = 25_000
    ) {
        self.isEnabled = isEnabled
        self.interval = interval
        self.pushes = pushes
        self.window = window
    }

    /// Why this configuration cannot work, or nil (`FanoutEngine.init` refuses it with this).
    public var problem: String? {
        if interval < .milliseconds(1) || interval > .seconds(3600) {
            return "interval must be in 1 ms...1 hour (got \(interval))"
        }
        if pushes < 1 || pushes > 100_000_000 { return "pushes must be in 1...100,000,000 (got \(pushes))" }
        if window < pushes || window > 1_000_000_000 {
            return "window must be at least pushes (\(pushes)) and at most 1,000,000,000 (got \(window))"
        }
        return nil
    }
}

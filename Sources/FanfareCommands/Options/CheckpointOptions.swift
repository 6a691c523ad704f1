import ArgumentParser
import FanfareFanout

/// How often a durable engine records the progress of running waves (`CheckpointConfiguration`); shared by
/// `serve` and `demo`.
public struct CheckpointOptions: ParsableArguments {
    @Option(help: "Milliseconds between two progress checkpoints of a running wave (per shard).")
    var checkpointInterval = 100

    @Option(help: "Pushes between two progress checkpoints of a running wave (per shard), whichever comes first.")
    var checkpointPushes = 10_000

    @Option(
        help: "Most members a shard sends past a wave's last durable checkpoint: the most a crash can resend per shard."
    )
    var checkpointWindow = 25_000

    @Flag(
        help:
            "Record no progress: waves are still saved at publish and their reports at completion, but a restart sends an unfinished wave again from the start."
    )
    var noCheckpoints = false

    /// The engine's setting; the ranges are the engine's own (`FanoutConfiguration` checks them again), said
    /// here with the flags' names.
    public init() {}

    public func configuration() throws(UsageError) -> CheckpointConfiguration {
        guard (1...3_600_000).contains(checkpointInterval) else {
            throw UsageError("--checkpoint-interval must be in 1...3600000 milliseconds (got \(checkpointInterval))")
        }
        guard (1...100_000_000).contains(checkpointPushes) else {
            throw UsageError("--checkpoint-pushes must be in 1...100000000 (got \(checkpointPushes))")
        }
        guard checkpointWindow >= checkpointPushes && checkpointWindow <= 1_000_000_000 else {
            throw UsageError(
                "--checkpoint-window must be at least --checkpoint-pushes (\(checkpointPushes)) and at most 1000000000 "
                    + "(got \(checkpointWindow))")
        }
        return CheckpointConfiguration(
            isEnabled: !noCheckpoints, interval: .milliseconds(checkpointInterval), pushes: checkpointPushes,
            window: checkpointWindow)
    }
}

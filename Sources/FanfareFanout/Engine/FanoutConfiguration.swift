import FanfareClient
import FanfareRegistry

/// How the fan-out engine runs. One engine serves one app (bundle id) in one APNs environment; its
/// `client.workerCount` is the shard count (one shard per worker thread).
public struct FanoutConfiguration: Sendable {
    /// The data plane: host, TLS, provider tokens, topic, workers, connections, streams.
    public var client: ClientConfiguration
    public var bundleID: String
    public var environment: APNsEnvironment
    /// Priority-10 budgets per activity (apns-spec.md §4: Apple publishes no numbers; these are
    /// community-observed defaults).
    public var standardBudget: PriorityBudgetProfile = .standard
    public var frequentBudget: PriorityBudgetProfile = .frequent
    /// At most one push per activity per this interval (Apple DTS: "no more than one update per second per
    /// activity"); a newer state waits, older ones are superseded. nil turns it off.
    public var minimumInterval: Duration? = .seconds(1)
    /// Back-offs before each retry of a transient failure (429, 5xx, no answer); the retry sends the newest
    /// state. Their count is the retry limit.
    public var retryDelays: [Duration] = [.milliseconds(500), .seconds(2), .seconds(8)]
    /// Commands (publishes, registration batches) each shard's queue holds; a full queue is back-pressure.
    public var commandQueueCapacity: Int = 4096
    /// How often the engine retires activities past ActivityKit's lifetime and ended channels.
    public var maintenanceInterval: Duration = .seconds(60)
    /// ActivityKit keeps an activity ≤ 8 h active plus ≤ 4 h on the Lock Screen (apns-spec.md §1.19).
    public var activityLifetime: Duration = .seconds(12 * 3600)
    /// An `end` without `dismissal-date` stays up to 4 h (apns-spec.md §3): retire its channel after this.
    public var defaultDismissalWindow: Duration = .seconds(4 * 3600)
    /// Sees every push result (each attempt, retries included) on the worker thread that finished it, before
    /// the engine accounts it: for audits and tests (the fault-matrix test checks each token against the
    /// simulator's log with it). Must be quick and must not block; nil costs one branch per push.
    public var onPushResult: (@Sendable (PushResult) -> Void)? = nil
    /// UNIX seconds; replaceable in tests.
    public var wallClock: @Sendable () -> Int64 = { Int64(time(nil)) }

    public init(client: ClientConfiguration, bundleID: String, environment: APNsEnvironment = .production) {
        self.client = client
        self.bundleID = bundleID
        self.environment = environment
    }
}

import Glibc

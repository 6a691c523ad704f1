import FanfareClient
import FanfareCore
import FanfareStorage
import Logging
import Metrics

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
    /// activity"); a newer state waits, older ones are superseded. nil turns it off. At most an hour.
    public var minimumInterval: Duration? = .seconds(1)
    /// Back-offs before each retry of a transient failure (429, 5xx, no answer); the retry sends the newest
    /// state. Their count is the retry limit (at most `maximumRetries`).
    public var retryDelays: [Duration] = [.milliseconds(500), .seconds(2), .seconds(8)]
    /// Pushes whose connection ended before APNs answered (`PushFailure.unconfirmed`: APNs may have
    /// processed them). false (default): the member's outcome is failed, reason `Unconfirmed`. true: they are
    /// retried through the retry lanes like a 5xx; a retry that is delivered counts in the wave's
    /// `possibleDuplicates` (the device may show the state twice).
    public var retryUnconfirmed = false
    /// Commands each shard's queue holds (rounded up to a power of two): half for control commands (publishes,
    /// registration batches), half for single pushes; a full half is back-pressure.
    public var commandQueueCapacity: Int = 4096
    /// Waves published and not complete yet, engine-wide; a publish beyond it is refused
    /// (`PublishError.tooManyUnfinishedWaves`). Each holds a slot on every shard until it completes there.
    public var maximumUnfinishedWaves: Int = 4096
    /// Complete waves `FanoutEngine.waves` keeps (the newest ones); unfinished waves are always kept.
    public var retainedWaves: Int = 1000
    /// Complete waves are also dropped this long after they completed (nil: by count only).
    public var retainedWaveAge: Duration? = nil
    /// When to stop deleting tokens because APNs calls too many of them bad (a configuration mistake).
    public var invalidTokenBreaker = InvalidTokenBreakerConfiguration()
    /// Progress checkpoints of running waves, when the engine has a `WaveStore` (see `CheckpointConfiguration`).
    public var checkpoints = CheckpointConfiguration()
    /// A graceful `shutdown()` of an engine with a wave store waits this long for pushes in flight to be
    /// answered (so the next start does not send them again), then checkpoints and stops.
    public var shutdownDrainTimeout: Duration = .seconds(10)
    /// Final reports a wave store keeps (per app, newest first); older ones are pruned at each maintenance pass.
    public var storedWaveReports = 100_000
    /// How often the engine retires activities past ActivityKit's lifetime and ended channels, and forgets
    /// channels nothing uses any more.
    public var maintenanceInterval: Duration = .seconds(60)
    /// Several engines (nodes) share the store (`SharedWaveStore`, docs/deployment.md): a shard holds tokens and
    /// sends only while this node holds its lease (`FanoutEngine.takeShard`); waves come from the store's feed
    /// (`catchUpWaves`). The engine's shard count (`client.workerCount`) must then be the cluster's.
    public var leasedShards = false
    /// ActivityKit keeps an activity ≤ 8 h active plus ≤ 4 h on the Lock Screen (apns-spec.md §1.19).
    public var activityLifetime: Duration = .seconds(12 * 3600)
    /// An `end` without `dismissal-date` stays up to 4 h (apns-spec.md §3): retire its channel after this.
    /// A later `dismissal-date` is capped to it too (iOS removes an ended activity within 4 hours).
    public var defaultDismissalWindow: Duration = .seconds(4 * 3600)
    /// The APNs channel management endpoint (apns-spec.md §8.2) for the audience planner: with it the engine
    /// creates broadcast channels (`createBroadcastChannel(for:storagePolicy:)`) and deletes the ones it created
    /// once their match ended. nil: links only to channels the caller created, and none are deleted.
    public var channelManagement: ChannelManagementConfiguration?
    /// Sees every push result (each attempt, retries included) on the worker thread that finished it, before
    /// the engine accounts it: for audits and tests (the fault-matrix test checks each token against the
    /// simulator's log with it). Must be quick and must not block; nil costs one branch per push.
    public var onPushResult: (@Sendable (PushResult) -> Void)? = nil
    /// Where the engine reports what an operator must see (the invalid-token breaker, registry errors).
    public var logger = Logger(label: "fanfare.fanout")
    /// Where the engine's metrics go (`fanfare_invalid_token_breaker_open`, ...); nil: the process-wide
    /// `MetricsSystem.factory`.
    public var metricsFactory: (any MetricsFactory)? = nil
    /// Several engines on one wave store (a deployment's apps and environments, `FanoutEngine.publish(_:on:)`)
    /// must number their waves from one sequence; nil: this engine numbers its own.
    public var waveNumbering: WaveNumbering? = nil
    /// UNIX seconds; replaceable in tests.
    public var wallClock: @Sendable () -> Int64 = { Int64(time(nil)) }

    /// The engine autoscales its connections (`ConnectionAutoscaling.standard`) unless `client` was given a
    /// fixed `connectionsPerWorker` or its own `autoscaling` (nil included: a fixed count).
    public init(client: ClientConfiguration, bundleID: String, environment: APNsEnvironment = .production) {
        self.client = client
        if !client.connectionCountChosen { self.client.autoscaling = .standard }
        self.bundleID = bundleID
        self.environment = environment
    }

    /// Most retries a push may get (`retryDelays.count`).
    public static let maximumRetries = 100
    /// Most waves a shard can hold unfinished (15 bits of a push cookie, one value reserved).
    public static let waveSlotLimit = FanoutCookie.maximumWaves - 1
    /// Longest durations the engine accepts for its intervals (its clocks count in deciseconds and
    /// nanoseconds; beyond these a typo, not a policy).
    static let longestInterval: Duration = .seconds(3600)
    static let longestRetention: Duration = .seconds(400 * 24 * 3600)

    /// Throws the first setting that cannot work, or that points the engine at the wrong APNs environment or
    /// app (a mistake that would make APNs call every token bad).
    func validate() throws(FanoutError) {
        func require(_ condition: Bool, _ field: String, _ problem: @autoclosure () -> String) throws(FanoutError) {
            if !condition { throw .invalidConfiguration(field: field, problem: problem()) }
        }
        try require(client.workerCount >= 1, "client.workerCount", "must be at least 1 (one shard per worker)")
        try require(client.workerCount <= 1024, "client.workerCount", "must be at most 1024")
        try require(!bundleID.isEmpty, "bundleID", "must not be empty")
        try require(
            commandQueueCapacity >= 64 && commandQueueCapacity <= 1 << 24, "commandQueueCapacity",
            "must be in 64...\(1 << 24) (half for control commands, half for single pushes)")
        try require(
            maximumUnfinishedWaves >= 1 && maximumUnfinishedWaves <= Self.waveSlotLimit, "maximumUnfinishedWaves",
            "must be in 1...\(Self.waveSlotLimit)")
        try require(retainedWaves >= 0, "retainedWaves", "must not be negative")
        if let age = retainedWaveAge {
            try require(age >= .zero && age <= Self.longestRetention, "retainedWaveAge", "must be in 0...400 days")
        }
        try require(retryDelays.count <= Self.maximumRetries, "retryDelays", "at most \(Self.maximumRetries) retries")
        for delay in retryDelays {
            try require(
                delay >= .zero && delay <= Self.longestInterval, "retryDelays",
                "each delay must be in 0...1 hour (got \(delay))")
        }
        if let minimumInterval {
            try require(
                minimumInterval >= .zero && minimumInterval <= Self.longestInterval, "minimumInterval",
                "must be in 0...1 hour (got \(minimumInterval)), or nil")
        }
        try require(
            maintenanceInterval > .zero && maintenanceInterval <= Self.longestRetention, "maintenanceInterval",
            "must be positive and at most 400 days")
        try require(
            activityLifetime > .zero && activityLifetime <= Self.longestRetention, "activityLifetime",
            "must be positive and at most 400 days")
        try require(
            defaultDismissalWindow >= .zero && defaultDismissalWindow <= Self.longestRetention,
            "defaultDismissalWindow",
            "must be in 0...400 days")
        for (name, profile) in [("standardBudget", standardBudget), ("frequentBudget", frequentBudget)] {
            if let problem = profile.problem { throw .invalidConfiguration(field: name, problem: problem) }
        }
        if let problem = invalidTokenBreaker.problem {
            throw .invalidConfiguration(field: "invalidTokenBreaker", problem: problem)
        }
        if let problem = checkpoints.problem { throw .invalidConfiguration(field: "checkpoints", problem: problem) }
        try require(storedWaveReports >= 1, "storedWaveReports", "must be at least 1")
        try require(
            shutdownDrainTimeout >= .zero && shutdownDrainTimeout <= Self.longestInterval, "shutdownDrainTimeout",
            "must be in 0...1 hour")
        try checkEnvironmentAndTopic()
    }

    /// APNs hosts and the environment each serves (apns-spec.md §1.1; api.development is an alias of sandbox).
    static let apnsHosts: [String: APNsEnvironment] = [
        "api.push.apple.com": .production, "api.sandbox.push.apple.com": .sandbox,
        "api.development.push.apple.com": .sandbox,
    ]

    /// A sandbox token sent to production (or the reverse) and a topic of another app are answered
    /// BadDeviceToken / DeviceTokenNotForTopic for every token: refuse to start instead. Other hosts (a
    /// simulator on loopback, a proxy) are not checked.
    private func checkEnvironmentAndTopic() throws(FanoutError) {
        var host = client.host.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        if let served = Self.apnsHosts[host], served != environment {
            throw .environmentMismatch(host: client.host, hostEnvironment: served, environment: environment)
        }
        if client.topic != bundleID && client.topic != bundleID + Topic.liveActivitySuffix {
            throw .topicMismatch(topic: client.topic, bundleID: bundleID)
        }
    }
}

/// When the engine stops deleting tokens: if APNs answers `BadDeviceToken` or `DeviceTokenNotForTopic` for
/// an abnormal share of pushes, the engine is most likely pointed at the wrong environment or app, and
/// deleting would wipe good tokens.
///
/// Each shard judges its answers in windows of `window` results (or fewer, when the shard runs out of work
/// with all its answers in). Until its window is judged normal, a token answered with one of those two
/// reasons stays registered and its wave waits for it. A window trips the breaker when it holds at least
/// `minimumSuspects` such answers and they are more than `maximumShare` of its results.
public struct InvalidTokenBreakerConfiguration: Sendable, Equatable {
    /// false: every such answer deletes its token at once (the behaviour before the breaker).
    public var isEnabled = true
    /// Results per judgement window of one shard.
    public var window = 1000
    /// The share of BadDeviceToken / DeviceTokenNotForTopic answers in a window above which the breaker trips.
    public var maximumShare = 0.5
    /// Windows with fewer such answers never trip (a few dead tokens in a small wave).
    public var minimumSuspects = 10

    public init() {}

    var problem: String? {
        if window < 1 || window > 1 << 24 { return "window must be in 1...\(1 << 24)" }
        if !(maximumShare >= 0 && maximumShare < 1) { return "maximumShare must be in 0..<1" }
        if minimumSuspects < 1 || minimumSuspects > window { return "minimumSuspects must be in 1...window" }
        return nil
    }
}

import Glibc

import FanfareClient
import FanfareCore

/// Totals of the engine and its client.
public struct FanoutStatistics: Sendable {
    public var client: ClientStatistics
    public var invalidationsPersisted = 0
    public var invalidationsKept = 0
    public var registryErrors = 0
    public var lastRegistryError: String?
    public var lastConnectionError: String?
    /// BadDeviceToken / DeviceTokenNotForTopic answers waiting for the breaker's verdict (their tokens kept).
    public var invalidTokensHeld = 0
    public var breaker = InvalidTokenBreakerState.closed
    /// Registrations a shard had no room for (its 4 GiB token arena was full); they stay in the registry.
    public var registrationsRefused = 0
    /// Several nodes: registrations from the registry (the change feed, a shard's load) whose channels would have
    /// taken the engine past `FanoutEngine.maximumChannels` channels in use; they stay in the registry and are
    /// loaded when their shard is next taken.
    public var registrationsRefusedForChannels = 0
    public var unfinishedWaves = 0
    /// Durable waves: transactions the checkpoint thread wrote, and failed writes (retried; waves stall at their
    /// window meanwhile).
    public var checkpointWrites = 0
    public var checkpointErrors = 0
    public var lastCheckpointError: String?
    /// Channels the engine tracks (members or waves); forgotten ones do not count.
    public var channelsInUse = 0
    /// Commands waiting in the shards' queues (publishes, registrations, single pushes, ...).
    public var queuedCommands = 0
}

/// A channel as the engine sees it (`FanoutEngine.channelSummary`).
public struct ChannelSummary: Sendable {
    public var channel: String
    /// Live update tokens following it (what an `update` or `end` wave would target now).
    public var updateTokens = 0
    /// Live push-to-start tokens following it (what a `start` wave would target now).
    public var pushToStartTokens = 0
    /// The newest `timestamp` published on it since the engine started (nil: none, or forgotten).
    public var latestTimestamp: Int64?
    /// Its waves that are not complete, oldest first.
    public var liveWaves: [Wave] = []

    public init(channel: String, latestTimestamp: Int64? = nil) {
        self.channel = channel
        self.latestTimestamp = latestTimestamp
    }
}

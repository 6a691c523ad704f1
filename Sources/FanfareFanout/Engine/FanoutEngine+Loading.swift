import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

/// Start-up: the engine's parts made, and filled from the registry and the wave store.
extension FanoutEngine {
    /// One shard per worker, with the configuration's budgets, interval and retries.
    static func makeShards(
        _ configuration: FanoutConfiguration, invalidations: RegistryWorker, breaker: InvalidTokenBreaker
    ) -> [Shard] {
        var settings = ShardSettings(
            standardBudget: configuration.standardBudget, frequentBudget: configuration.frequentBudget,
            minimumInterval: configuration.minimumInterval.map { nanoseconds($0) } ?? 0,
            retryDelays: configuration.retryDelays.map { nanoseconds($0) })
        settings.retryUnconfirmed = configuration.retryUnconfirmed
        return (0..<configuration.client.workerCount).map {
            Shard(
                index: $0, settings: settings, commandCapacity: configuration.commandQueueCapacity,
                invalidations: invalidations, breaker: breaker)
        }
    }

    /// With leased shards, the wave store the nodes share; nothing is held yet, so no shard sends (shards fill
    /// when this node takes their leases). Nil without leased shards.
    static func sharedWaveStore(
        _ waveStore: (any WaveStore)?, of shards: [Shard], configuration: FanoutConfiguration
    ) throws(FanoutError) -> (any SharedWaveStore)? {
        guard configuration.leasedShards else { return nil }
        guard let shared = waveStore as? any SharedWaveStore else {
            throw .invalidConfiguration(
                field: "leasedShards", problem: "needs a wave store shared by the nodes (a SharedWaveStore)")
        }
        for shard in shards { shard.sendUntil.store(0, ordering: .relaxed) }
        return shared
    }

    /// The control state at start-up: the channels of the tokens loaded into the shards (none yet with leased
    /// shards), the shards held, and the broadcast links and subscriber counts.
    static func loadControlState(
        from store: TokenStore, into shards: [Shard], configuration: FanoutConfiguration
    ) throws(FanoutError) -> ControlState {
        let channels =
            configuration.leasedShards
            ? ChannelDirectory(limit: maximumChannels)
            : try load(from: store, into: shards, configuration: configuration)
        var state = ControlState(channels: channels)
        state.held = Array(repeating: !configuration.leasedShards, count: shards.count)
        try loadBroadcastState(from: store, configuration: configuration, into: &state)
        return state
    }

    static func makeChannelManager(
        _ management: ChannelManagementConfiguration?
    ) throws(FanoutError) -> BroadcastChannelManager? {
        guard let management else { return nil }
        do { return try BroadcastChannelManager(configuration: management) } catch {
            throw .client("channel management: \(error)")
        }
    }

    /// The checkpoint writer (set on the shards when checkpoints are on) and what the wave store knows at start-up
    /// (`loadWaveState`).
    static func openWaveStore(
        _ waveStore: any WaveStore, of shards: [Shard], configuration: FanoutConfiguration,
        into state: inout ControlState
    ) throws(FanoutError) -> (writer: CheckpointWriter, retirements: [String: Int64], unfinished: [UnfinishedWave]) {
        let writer = CheckpointWriter(
            store: waveStore, bundleID: configuration.bundleID, environment: configuration.environment,
            shards: shards.count, logger: configuration.logger)
        if configuration.checkpoints.isEnabled {
            for shard in shards { shard.configureCheckpoints(writer, configuration.checkpoints) }
        }
        let (retirements, unfinished) = try loadWaveState(from: waveStore, configuration: configuration, into: &state)
        return (writer, retirements, unfinished)
    }

    static func makeClient(
        _ configuration: FanoutConfiguration, resultHandler: ResultRouter, producers shards: [Shard],
        providerKeys: ProviderKeyRotation
    ) throws(FanoutError) -> APNsClient {
        do {
            var clientConfiguration = configuration.client
            // The autoscaler logs its decisions.
            if clientConfiguration.logger == nil { clientConfiguration.logger = configuration.logger }
            return try APNsClient(
                configuration: clientConfiguration, resultHandler: resultHandler, producers: shards,
                providerKeys: providerKeys)
        } catch {
            throw .client("\(error)")
        }
    }

    /// The audience planner's links and subscriber counts.
    static func loadBroadcastState(
        from store: TokenStore, configuration: FanoutConfiguration, into state: inout ControlState
    ) throws(FanoutError) {
        let (bundleID, environment) = (configuration.bundleID, configuration.environment)
        do {
            let links = try (store as? any BroadcastLinkStore)?.broadcastLinks(
                bundleID: bundleID, environment: environment)
            for link in links ?? [] {
                guard let channelID = try? BroadcastChannelID(link.channelID) else {
                    configuration.logger.error(
                        "broadcast: the stored link of \(link.channel) names channel id '\(link.channelID)', not base64; ignored"
                    )
                    continue
                }
                state.links[link.channel] = LinkedChannel(
                    channelID: channelID, storagePolicy: link.storagePolicy, link: link)
            }
            state.subscribers = try store.subscriptionCounts(bundleID: bundleID, environment: environment)
        } catch {
            throw .registry(error)
        }
    }

    /// What the wave store knows at start-up: each channel's newest timestamp and the next wave id (into
    /// `state`), the pending retirements, and the waves an earlier engine left unfinished (none with leased
    /// shards: those resume when this node takes their shards).
    static func loadWaveState(
        from waveStore: any WaveStore, configuration: FanoutConfiguration, into state: inout ControlState
    ) throws(FanoutError) -> (retirements: [String: Int64], unfinished: [UnfinishedWave]) {
        let (bundleID, environment) = (configuration.bundleID, configuration.environment)
        do {
            state.latest = try waveStore.latestTimestamps(bundleID: bundleID, environment: environment)
            let last = try waveStore.lastWaveID()
            state.nextWaveID = last + 1
            configuration.waveNumbering?.advance(past: last)
            let retirements = try waveStore.pendingRetirements(bundleID: bundleID, environment: environment)
            let unfinished =
                configuration.leasedShards
                ? [] : try waveStore.unfinishedWaves(bundleID: bundleID, environment: environment)
            return (retirements, unfinished)
        } catch {
            throw .registry(error)
        }
    }

    /// Fills the shards; returns the channels they know.
    static func load(
        from store: TokenStore, into shards: [Shard], configuration: FanoutConfiguration
    ) throws(FanoutError) -> ChannelDirectory {
        let shardCount = shards.count
        var channels = ChannelDirectory(limit: maximumChannels)
        var tooMany = false
        do {
            // Room for everything in the store up front (an upper bound: other apps' tokens are counted too).
            let expected = try store.count()
            for shard in shards { shard.reserve(tokens: expected / shardCount + expected / (shardCount * 16) + 16) }
            var ids: [UInt16] = []
            try store.forEachRegistration(bundleID: configuration.bundleID, environment: configuration.environment) {
                registration in
                guard !tooMany else { return }
                guard channels.canAdmit(registration.channels) else {
                    tooMany = true
                    return
                }
                ids.removeAll(keepingCapacity: true)
                for name in registration.channels { ids.append(channels.mention(name, sequence: 0)) }
                let shard = shards[APNsClient.workerIndex(for: registration.token, workerCount: shardCount)]
                shard.register(Self.entry(registration, channels: ids))
            }
        } catch {
            throw .registry(error)
        }
        if tooMany { throw .tooManyChannels(limit: maximumChannels) }
        return channels
    }

    static func entry(_ registration: TokenRegistration, channels: [UInt16]) -> RegistrationBatch.Entry {
        RegistrationBatch.Entry(
            token: registration.token, pushToStart: registration.kind == .pushToStart,
            frequentUpdates: registration.frequentUpdates,
            supportsBroadcast: registration.kind == .pushToStart && registration.supportsBroadcast,
            registeredAtSeconds: UInt32(clamping: registration.lastSeenAt / 1000), channels: channels)
    }
}

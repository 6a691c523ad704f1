import FanfareClient
import FanfareCore
import FanfareIO
import FanfareRegistry
import Synchronization
import Glibc

/// Why the engine refused a registration or could not start.
public enum FanoutError: Error, Sendable, CustomStringConvertible {
    case registry(RegistryError)
    /// The registration is for another app or environment than this engine serves.
    case wrongApp(index: Int, bundleID: String, environment: APNsEnvironment)
    case shutDown
    case client(String)
    /// The engine tracks at most `FanoutEngine.maximumChannels` channels in use at once (15 bits of a push
    /// cookie).
    case tooManyChannels(limit: Int)
    /// A configuration value that cannot work.
    case invalidConfiguration(field: String, problem: String)
    /// `client.host` is an APNs host of the other environment: every token would be answered BadDeviceToken.
    case environmentMismatch(host: String, hostEnvironment: APNsEnvironment, environment: APNsEnvironment)
    /// `client.topic` is not this app's: every token would be answered DeviceTokenNotForTopic.
    case topicMismatch(topic: String, bundleID: String)
    /// A broadcast link the engine refuses (what is wrong).
    case invalidBroadcastLink(String)
    /// Creating or deleting an APNs broadcast channel needs `FanoutConfiguration.channelManagement`.
    case noChannelManagement
    /// The channel management API failed (APNs' answer or the transport's error).
    case broadcast(ChannelManagementError)

    public var description: String {
        switch self {
        case .registry(let error): return "\(error)"
        case .wrongApp(let index, let bundleID, let environment):
            return "registration #\(index) is for \(bundleID) (\(environment)); this engine serves another app"
        case .shutDown: return "the engine is shut down"
        case .client(let message): return "could not start the APNs client: \(message)"
        case .tooManyChannels(let limit):
            return "more than \(limit) channels in use at once; a channel no token follows and no wave runs on is "
                + "forgotten at the next maintenance pass (runMaintenance) and no longer counts"
        case .invalidConfiguration(let field, let problem): return "fan-out configuration: \(field): \(problem)"
        case .invalidBroadcastLink(let problem): return "broadcast link: \(problem)"
        case .noChannelManagement:
            return "no channel management configured (FanoutConfiguration.channelManagement): the engine cannot create or delete APNs broadcast channels"
        case .broadcast(let error): return "APNs channel management: \(error)"
        case .environmentMismatch(let host, let hostEnvironment, let environment):
            let right = FanoutConfiguration.apnsHosts.first { $0.value == environment && !$0.key.contains("development") }?.key ?? "?"
            return "client.host \(host) is APNs \(hostEnvironment), but the engine serves \(environment) tokens: "
                + "APNs would answer BadDeviceToken for every one. Use host \(right), or environment .\(hostEnvironment) "
                + "if the tokens really are \(hostEnvironment) tokens"
        case .topicMismatch(let topic, let bundleID):
            return "client.topic '\(topic)' is not a topic of bundle id '\(bundleID)': APNs would answer "
                + "DeviceTokenNotForTopic for every token. Use '\(bundleID)\(Topic.liveActivitySuffix)' "
                + "(Topic.liveActivity(bundleID:)), or fix bundleID"
        }
    }
}

/// The fan-out engine: a channel update reaches every token that follows the channel, sharded over the
/// client's worker threads, with per-activity priority budgets, latest state wins, and dead-token pruning.
///
/// Control-plane calls (`register`, `unregister`, `publish`) may come from any thread. They are durable or
/// refused before they return, and reach the shards through each shard's lock-free command queue; the
/// per-push work runs on the worker threads without locks (see docs/architecture.md).
public final class FanoutEngine: Sendable {
    public let configuration: FanoutConfiguration
    let shards: [Shard]
    private let client: APNsClient
    let store: TokenStore
    let waveStore: (any WaveStore)?
    let registryWorker: RegistryWorker
    private let router: ResultRouter
    let breaker: InvalidTokenBreaker
    let history: WaveHistory
    /// Writes checkpoints, final reports and retirements when the engine has a wave store.
    private let checkpointWriter: CheckpointWriter?
    let control: Mutex<ControlState>
    /// Pending retirements have their own lock: wave completions (on worker threads) add to them, and a worker
    /// must never wait for the control lock (its holder may be waiting for that worker's queue to drain).
    private let retirements = Mutex<[String: Int64]>([:])
    /// One channel sweep at a time.
    private let sweeping = Mutex<Void>(())
    let isShutDown = Atomic<Bool>(false)
    private let enqueuingPushes = Atomic<Int>(0)
    /// Published waves not complete yet (refused past `maximumUnfinishedWaves`).
    let unfinishedWaves = Atomic<Int>(0)
    /// Where broadcast links are kept (the token store, when it is a `BroadcastLinkStore`); nil: in memory only.
    let linkStore: (any BroadcastLinkStore)?
    /// Creates and deletes APNs broadcast channels (`FanoutConfiguration.channelManagement`).
    let channelManager: BroadcastChannelManager?
    /// Leased shards (several nodes): the shared store, and the wave feed's position (FanoutEngine+LeasedShards).
    let sharedStore: (any SharedWaveStore)?
    let feed: Mutex<WaveFeedState>

    /// Channels in use at once (every shard indexes them by the engine's 15-bit channel id).
    public static let maximumChannels = FanoutCookie.maximumWaves

    struct ControlState {
        var channels: ChannelDirectory
        /// The newest timestamp published per channel (kept for channels the directory forgot, and loaded from
        /// the wave store at start: latest state wins across restarts).
        var latest: [String: Int64] = [:]
        var nextWaveID: UInt64 = 1
        /// Stamps every command that names a channel (and publishes, which shards check for order).
        var nextSequence: UInt64 = 1
        /// Channels linked to an APNs broadcast channel (the audience planner, docs/fanout.md).
        var links: [String: LinkedChannel] = [:]
        /// Activities registered as subscribed to each channel's broadcasts (broadcast subscriptions).
        var subscribers: [String: Int] = [:]
        /// Shards this engine fills and sends for: all of them, or with leased shards the ones this node holds.
        var held: [Bool] = []
    }

    /// A channel's APNs broadcast channel, as the planner uses it.
    struct LinkedChannel {
        var channelID: BroadcastChannelID
        /// 0: no message stored (`apns-expiration` must be 0); 1: the most recent message stored.
        var storagePolicy: Int
        var link: BroadcastLink
    }

    /// Checks the configuration, loads the app's tokens from `store` into the shards, then starts the workers.
    /// - Parameter onInvalidation: called on the registry thread after a dead token was durably removed.
    /// - Parameter waveStore: where waves, their progress and their final reports are kept so that a restarted
    ///   engine resumes unfinished waves (docs/fanout.md, "Durable waves"); nil keeps waves in memory only.
    public init(
        configuration: FanoutConfiguration, store: TokenStore, waveStore: (any WaveStore)? = nil,
        onInvalidation: (@Sendable (InvalidationReport) -> Void)? = nil
    ) throws(FanoutError) {
        try configuration.validate()
        self.configuration = configuration
        self.store = store
        self.waveStore = waveStore
        let breaker = InvalidTokenBreaker(
            configuration: configuration.invalidTokenBreaker, logger: configuration.logger,
            metrics: configuration.metricsFactory, host: configuration.client.host,
            topic: configuration.client.topic, environment: configuration.environment, wallClock: configuration.wallClock)
        self.breaker = breaker
        history = WaveHistory(
            retained: configuration.retainedWaves, maximumAge: configuration.retainedWaveAge.map { Self.nanoseconds($0) })
        let retirement = RetirementBox()
        let registryWorker = RegistryWorker(
            store: store, maintenanceInterval: configuration.maintenanceInterval, onInvalidation: onInvalidation,
            logger: configuration.logger, metrics: configuration.metricsFactory,
            maintenance: { retirement.engine?.runMaintenance() })
        self.registryWorker = registryWorker
        var settings = ShardSettings(
            standardBudget: configuration.standardBudget, frequentBudget: configuration.frequentBudget,
            minimumInterval: configuration.minimumInterval.map { Self.nanoseconds($0) } ?? 0,
            retryDelays: configuration.retryDelays.map { Self.nanoseconds($0) })
        settings.retryUnconfirmed = configuration.retryUnconfirmed
        let shards = (0..<configuration.client.workerCount).map {
            Shard(
                index: $0, settings: settings, commandCapacity: configuration.commandQueueCapacity,
                invalidations: registryWorker, breaker: breaker)
        }
        self.shards = shards
        if configuration.leasedShards {
            guard let shared = waveStore as? any SharedWaveStore else {
                throw .invalidConfiguration(field: "leasedShards", problem: "needs a wave store shared by the nodes (a SharedWaveStore)")
            }
            sharedStore = shared
            // Nothing is held yet: shards fill when this node takes their leases.
            for shard in shards { shard.sendUntil.store(0, ordering: .relaxed) }
        } else {
            sharedStore = nil
        }
        let channels = configuration.leasedShards
            ? ChannelDirectory(limit: Self.maximumChannels)
            : try Self.load(from: store, into: shards, configuration: configuration)
        var controlState = ControlState(channels: channels)
        controlState.held = Array(repeating: !configuration.leasedShards, count: shards.count)
        // The audience planner's links and subscriber counts.
        linkStore = store as? any BroadcastLinkStore
        do {
            for link in try linkStore?.broadcastLinks(bundleID: configuration.bundleID, environment: configuration.environment) ?? [] {
                guard let channelID = try? BroadcastChannelID(link.channelID) else {
                    configuration.logger.error("broadcast: the stored link of \(link.channel) names channel id '\(link.channelID)', not base64; ignored")
                    continue
                }
                controlState.links[link.channel] = LinkedChannel(channelID: channelID, storagePolicy: link.storagePolicy, link: link)
            }
            controlState.subscribers = try store.subscriptionCounts(bundleID: configuration.bundleID, environment: configuration.environment)
        } catch {
            throw .registry(error)
        }
        if let management = configuration.channelManagement {
            do { channelManager = try BroadcastChannelManager(configuration: management) } catch { throw .client("channel management: \(error)") }
        } else {
            channelManager = nil
        }
        var unfinished: [UnfinishedWave] = []
        if let waveStore {
            let writer = CheckpointWriter(
                store: waveStore, bundleID: configuration.bundleID, environment: configuration.environment,
                shards: shards.count, logger: configuration.logger)
            if configuration.checkpoints.isEnabled {
                for shard in shards { shard.configureCheckpoints(writer, configuration.checkpoints) }
            }
            checkpointWriter = writer
            do {
                controlState.latest = try waveStore.latestTimestamps(bundleID: configuration.bundleID, environment: configuration.environment)
                controlState.nextWaveID = try waveStore.lastWaveID() + 1
                let pending = try waveStore.pendingRetirements(bundleID: configuration.bundleID, environment: configuration.environment)
                retirements.withLock { $0 = pending }
                // Leased shards resume their unfinished waves when this node takes them.
                if !configuration.leasedShards {
                    unfinished = try waveStore.unfinishedWaves(bundleID: configuration.bundleID, environment: configuration.environment)
                }
            } catch {
                throw .registry(error)
            }
        } else {
            checkpointWriter = nil
        }
        feed = Mutex(WaveFeedState(lastWave: controlState.nextWaveID - 1, heldSince: Array(repeating: nil, count: shards.count)))
        control = Mutex(controlState)
        router = ResultRouter(shards: shards, observer: configuration.onPushResult)
        do {
            var clientConfiguration = configuration.client
            if clientConfiguration.logger == nil { clientConfiguration.logger = configuration.logger }  // the autoscaler's decisions
            client = try APNsClient(configuration: clientConfiguration, resultHandler: router, producers: shards)
        } catch {
            throw .client("\(error)")
        }
        retirement.engine = self
        if let checkpointWriter {
            let client = client
            checkpointWriter.kick = { shard in client.kickProducer(worker: shard) }
            checkpointWriter.start()
        }
        registryWorker.start()
        if !unfinished.isEmpty { resume(unfinished) }
    }

    deinit { shutdown() }

    /// Fills the shards; returns the channels they know.
    private static func load(
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
            registeredAt: UInt32(clamping: registration.lastSeenAt / 1000), channels: channels)
    }

    /// Whole nanoseconds, saturating (durations are checked by `FanoutConfiguration.validate`).
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if whole.overflow { return .max }
        return whole.partialValue.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000)).partialValue
    }

    // MARK: - Durable waves

    /// Complete reports read at start-up to find newer waves of a resumed wave's channel.
    static let supersedingReportsRead = 4096

    /// Picks up the waves an earlier engine left unfinished, oldest first: the newest wave of each channel
    /// (and audience) resumes from its shards' checkpoints; an older one, or one a newer wave of its channel
    /// followed, ends superseded for what is left; one past `freshUntil` ends expired.
    func resume(_ unfinished: [UnfinishedWave], onShards taking: [Int]? = nil) {
        let now = configuration.wallClock()
        func audienceKey(_ record: WaveRecord) -> String { record.channel + (record.event == "start" ? "\u{0}start" : "\u{0}update") }
        var newest: [String: UInt64] = [:]
        for wave in unfinished { newest[audienceKey(wave.record)] = max(newest[audienceKey(wave.record)] ?? 0, wave.record.id) }
        // Waves that completed after an unfinished one (on another engine, or before the crash) supersede it too.
        let oldest = unfinished.first?.record.id ?? 0
        do {
            for report in try waveStore?.waveReports(
                bundleID: configuration.bundleID, environment: configuration.environment, limit: Self.supersedingReportsRead) ?? []
            where report.id > oldest {
                let key = report.channel + (report.event == "start" ? "\u{0}start" : "\u{0}update")
                newest[key] = max(newest[key] ?? 0, report.id)
            }
        } catch {
            configuration.logger.error("durable waves: reading recent reports failed (\(error)); resuming without them")
        }
        for wave in unfinished {
            let record = wave.record
            let stored: StoredWaveUpdate
            do {
                stored = try StoredWaveUpdate(
                    record, wallNow: now, wallMilliseconds: Self.wallMilliseconds(), monotonicNow: monotonicNow())
            } catch {
                configuration.logger.error("durable waves: wave \(record.id) \(error); it is not resumed")
                continue
            }
            let (update, payload, publishedAt, deadline) = (stored.update, stored.payload, stored.publishedAt, stored.deadline)
            var mode = Shard.ResumeMode.resume
            if newest[audienceKey(record)] != record.id {
                mode = .supersede
            } else if let freshUntil = record.freshUntil, freshUntil <= now {
                mode = .expire
            }
            var checkpoints = [ShardCheckpoint?](repeating: nil, count: shards.count)
            var restarts = 0
            if record.shardCount == shards.count {
                for stored in wave.checkpoints where stored.shard >= 0 && stored.shard < shards.count {
                    do {
                        let checkpoint = try ShardCheckpoint(decoding: stored.data)
                        checkpoints[stored.shard] = checkpoint
                        restarts = max(restarts, checkpoint.restarts)
                    } catch {
                        configuration.logger.error(
                            "durable waves: wave \(record.id), shard \(stored.shard): \(error); that shard's part starts over")
                    }
                }
            } else if !wave.checkpoints.isEmpty {
                configuration.logger.warning(
                    "durable waves: wave \(record.id) ran on \(record.shardCount) shards, this engine has \(shards.count): it starts over")
            }
            var channelPayload: PushPayload?
            if let bytes = record.channelPayload {
                channelPayload = try? bytes.withUnsafeBytes { bytes throws(PayloadError) in try PushPayload(copying: bytes) }
            }
            let broadcastChannel = record.broadcastChannelID.flatMap { try? BroadcastChannelID($0) }
            if record.broadcastChannelID != nil && broadcastChannel == nil {
                configuration.logger.error("durable waves: wave \(record.id)'s broadcast channel id is not base64; its broadcast is not sent")
            }
            control.withLock { state in
                let sequence = state.nextSequence
                state.nextSequence += 1
                let channel = state.channels.mention(record.channel, sequence: sequence)
                state.channels.setLatestTimestamp(max(state.latest[record.channel] ?? record.timestamp, record.timestamp), of: channel)
                // The broadcast half as published; its outcome comes from its shard's checkpoint.
                let broadcast = broadcastChannel.map { channelID in
                    BroadcastPart(
                        channelID: channelID, subscribers: state.subscribers[record.channel] ?? 0,
                        expiration: state.links[record.channel]?.storagePolicy == 1 ? record.freshUntil ?? 0 : 0, wave: record.id,
                        shard: Self.broadcastShard(record.channel, shards: shards.count))
                }
                let resumed = Wave(
                    id: record.id, update: update, shardCount: shards.count, publishedAt: publishedAt, breaker: breaker,
                    publishedAtWall: record.publishedAt, restarts: restarts + 1, broadcast: broadcast, participating: taking,
                    onComplete: { [weak self] wave in self?.waveCompleted(wave) })
                // Its tallies start from the checkpoints (the shards store them before anything is sent).
                let published = PublishedUpdate(
                    wave: resumed, update: update, channel: channel, sequence: sequence, payload: payload, deadline: deadline,
                    channelPayload: channelPayload)
                published.hasAlert = record.hasAlert
                unfinishedWaves.add(1, ordering: .acquiringAndReleasing)
                history.append(resumed)
                for index in taking ?? Array(shards.indices) {
                    enqueueWaiting(.resumeWave(ResumedWave(update: published, checkpoint: checkpoints[index], mode: mode)), shard: index)
                }
            }
            configuration.logger.notice(
                "durable waves: wave \(record.id) on \(record.channel) \(mode == .resume ? "resumes" : mode == .supersede ? "ends superseded" : "ends expired") after a restart")
        }
    }

    // MARK: - Registration

    /// Registers (or refreshes) tokens: durable in the registry when this returns, then applied to the shards
    /// (unless the engine shut down meanwhile: the next start loads them).
    public func register(_ registrations: [TokenRegistration]) throws(FanoutError) {
        _ = try register(registrations, subscriptions: [])
    }

    /// Registers tokens and broadcast subscriptions in one registry transaction, then applies the tokens to the
    /// shards; tokens the registry replaced (`RegistrationResult.replacedTokens`: an older push-to-start token
    /// of the same device and type, update tokens of an activity now subscribed to a broadcast) leave the
    /// shards at once, so no wave sends to them again.
    @discardableResult
    public func register(_ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription])
        throws(FanoutError) -> RegistrationResult
    {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        for (index, registration) in registrations.enumerated()
        where registration.bundleID != configuration.bundleID || registration.environment != configuration.environment {
            throw .wrongApp(index: index, bundleID: registration.bundleID, environment: registration.environment)
        }
        for (index, subscription) in subscriptions.enumerated()
        where subscription.bundleID != configuration.bundleID || subscription.environment != configuration.environment {
            throw .wrongApp(
                index: registrations.count + index, bundleID: subscription.bundleID, environment: subscription.environment)
        }
        // Channel ids are taken (and pinned) before the durable write, so a concurrent registration cannot fill
        // the channel table in between.
        let pinned: [UInt16]? = control.withLock { state in
            guard state.channels.canAdmit(registrations.lazy.flatMap(\.channels)) else { return nil }
            let sequence = state.nextSequence
            var pinned: [UInt16] = []
            for registration in registrations {
                for name in registration.channels { pinned.append(state.channels.mention(name, sequence: sequence, pin: true)) }
            }
            return pinned
        }
        guard let pinned else { throw .tooManyChannels(limit: Self.maximumChannels) }
        var written = false
        defer {
            if !written { control.withLock { state in for id in pinned { state.channels.unpin(id, sequence: 0) } } }
        }
        let result: RegistrationResult
        do { result = try store.register(registrations, subscriptions: subscriptions) } catch { throw .registry(error) }
        written = true
        let replaced = Set(result.replacedTokens)
        var perShard = Array(repeating: [RegistrationBatch.Entry](), count: shards.count)
        var next = 0
        for registration in registrations {
            let ids = Array(pinned[next..<next + registration.channels.count])
            next += registration.channels.count
            // Replaced within the batch (an earlier push-to-start token of the same device): never enters a shard.
            guard !replaced.contains(registration.token) else { continue }
            perShard[APNsClient.workerIndex(for: registration.token, workerCount: shards.count)]
                .append(Self.entry(registration, channels: ids))
        }
        control.withLock { state in
            let sequence = state.nextSequence
            state.nextSequence += 1
            for id in pinned { state.channels.unpin(id, sequence: sequence) }
            Self.apply(result.subscriptionDeltas, to: &state.subscribers)
            guard !isShutDown.load(ordering: .acquiring) else { return }
            for (index, entries) in perShard.enumerated() where !entries.isEmpty && state.held[index] {
                enqueueWaiting(.register(RegistrationBatch(entries)), shard: index)
            }
        }
        if !result.replacedTokens.isEmpty { applyRemoval(result.replacedTokens) }
        return result
    }

    /// Removes tokens from the registry (durably) and the shards. Returns how many were registered.
    @discardableResult
    public func unregister(_ tokens: [DeviceToken]) throws(FanoutError) -> Int {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        let removed: Int
        do { removed = try store.unregister(tokens) } catch { throw .registry(error) }
        applyRemoval(tokens)
        return removed
    }

    func applyRemoval(_ tokens: [DeviceToken]) {
        var perShard = Array(repeating: [DeviceToken](), count: shards.count)
        for token in tokens { perShard[APNsClient.workerIndex(for: token, workerCount: shards.count)].append(token) }
        control.withLock { state in
            guard !isShutDown.load(ordering: .acquiring) else { return }
            for (index, batch) in perShard.enumerated() where !batch.isEmpty && state.held[index] {
                enqueueWaiting(.unregister(TokenBatch(batch)), shard: index)
            }
        }
    }

    /// Durable work already happened, so the command must get through: wait for room (shards drain their
    /// queues every loop iteration, so this waits only under a burst of control traffic). Holding `control`,
    /// after checking the engine is not shut down (so the workers still drain).
    func enqueueWaiting(_ command: ShardCommand, shard index: Int) {
        let shard = shards[index]
        while !shard.inbox.hasControlRoom {
            usleep(200)
        }
        enqueueControl(command, shard: shard)
    }

    /// Holding `control`, with `shard.inbox.hasControlRoom` checked (see `ShardInbox`).
    private func enqueueControl(_ command: ShardCommand, shard: Shard) {
        shard.inbox.enqueueControl(command)
        client.kickProducer(worker: shard.index)
    }

    // MARK: - Publishing

    /// Starts a wave: encodes the update once and hands it to every shard. Returns at once; the `Wave` counts
    /// its progress and completes when every targeted token has its outcome.
    public func publish(_ update: ChannelUpdate) throws(PublishError) -> Wave {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        guard sharedStore == nil else { throw .sharedStore }
        let (payload, freshFor) = try validated(update)
        let publishedAt = monotonicNow()
        let deadline = freshFor.map { publishedAt &+ UInt64($0) * 1_000_000_000 } ?? 0
        // A kick-off on a linked channel: iOS 18+ devices get `input-push-channel` (their activity then follows
        // the channel's broadcasts); encoded outside the lock, for the link as it is now.
        var channelPayload: PushPayload?
        var kickOffLink: BroadcastChannelID?
        if update.content.event == .start, let link = control.withLock({ $0.links[update.channel]?.channelID }) {
            var content = update.content
            content.inputPushChannel = link.description
            do { channelPayload = try PushPayload(liveActivity: content) } catch { throw .invalidPayload(error) }
            kickOffLink = link
        }

        return try control.withLock { state throws(PublishError) -> Wave in
            guard !isShutDown.load(ordering: .acquiring) else { throw .shutDown }
            if let current = state.latest[update.channel], update.content.timestamp < current {
                throw .olderThanCurrent(channel: update.channel, timestamp: update.content.timestamp, current: current)
            }
            guard state.channels.canAdmit(CollectionOfOne(update.channel)) else {
                throw .tooManyChannels(limit: Self.maximumChannels)
            }
            let unfinished = unfinishedWaves.load(ordering: .acquiring)
            guard unfinished < configuration.maximumUnfinishedWaves else {
                throw .tooManyUnfinishedWaves(limit: configuration.maximumUnfinishedWaves)
            }
            // Room checked here is room at the enqueue below, on every shard or none (`ShardInbox`).
            for shard in shards where !shard.inbox.hasControlRoom {
                throw .backPressure(shard: shard.index)
            }
            let publishedAtWall = Self.wallMilliseconds()
            let broadcast = broadcastPart(for: update, wave: state.nextWaveID, in: state)
            // The kick-off variant only if the link did not change since it was encoded.
            let publishedChannelPayload = kickOffLink != nil && kickOffLink == state.links[update.channel]?.channelID ? channelPayload : nil
            if let waveStore {
                // Durable before anything is sent or `publish` returns (one transaction; under the lock so ids,
                // sequences and the store agree).
                let record = WaveRecord(
                    id: state.nextWaveID, bundleID: configuration.bundleID, environment: configuration.environment,
                    channel: update.channel, event: update.content.event.rawValue, timestamp: update.content.timestamp,
                    priority: update.priority.rawValue, hasAlert: update.hasAlert,
                    payload: Array(payload.bytes), freshUntil: update.freshUntil, collapseID: update.collapseID,
                    dismissalDate: update.content.dismissalDate, publishedAt: publishedAtWall, shardCount: shards.count,
                    startKeys: [], broadcastChannelID: broadcast?.channelID.description,
                    channelPayload: publishedChannelPayload.map { Array($0.bytes) })
                do { try waveStore.saveWave(record) } catch { throw .storage("\(error)") }
            }
            let sequence = state.nextSequence
            state.nextSequence += 1
            let channel = state.channels.mention(update.channel, sequence: sequence)
            state.channels.setLatestTimestamp(update.content.timestamp, of: channel)
            state.latest[update.channel] = max(state.latest[update.channel] ?? .min, update.content.timestamp)
            let wave = Wave(
                id: state.nextWaveID, update: update, shardCount: shards.count, publishedAt: publishedAt, breaker: breaker,
                publishedAtWall: publishedAtWall, broadcast: broadcast, onComplete: { [weak self] wave in self?.waveCompleted(wave) })
            state.nextWaveID += 1
            let published = PublishedUpdate(
                wave: wave, update: update, channel: channel, sequence: sequence, payload: payload, deadline: deadline,
                channelPayload: publishedChannelPayload)
            unfinishedWaves.add(1, ordering: .acquiringAndReleasing)
            history.append(wave)
            for shard in shards { enqueueControl(.publish(published), shard: shard) }
            return wave
        }
    }

    /// Checks an update before it is published; returns its encoded payload and how many seconds it stays fresh.
    func validated(_ update: ChannelUpdate) throws(PublishError) -> (PushPayload, freshFor: Int64?) {
        guard !update.channel.isEmpty else { throw .emptyChannel }
        let channelBytes = update.channel.utf8.count
        guard channelBytes <= TokenRegistration.maximumChannelNameByteCount else {
            throw .channelNameTooLong(bytes: channelBytes, limit: TokenRegistration.maximumChannelNameByteCount)
        }
        if let collapseID = update.collapseID {
            do { try CollapseID.validate(collapseID) } catch { throw .invalidCollapseID(error) }
        }
        let wallNow = configuration.wallClock()
        var freshFor: Int64?
        if let freshUntil = update.freshUntil {
            if freshUntil <= wallNow { throw .alreadyExpired(freshUntil: freshUntil, now: wallNow) }
            // APNs stores a push at most 30 days; anything later is a unit mistake (milliseconds?), and would
            // overflow the nanosecond deadline.
            let (ahead, overflow) = freshUntil.subtractingReportingOverflow(wallNow)
            if overflow || ahead > Self.longestFreshness {
                throw .freshUntilTooFar(freshUntil: freshUntil, now: wallNow, limitSeconds: Self.longestFreshness)
            }
            freshFor = ahead
        }
        do { return (try PushPayload(liveActivity: update.content), freshFor) } catch { throw .invalidPayload(error) }
    }

    /// Wakes a shard's worker (new commands or a new lease).
    func kick(shard index: Int) { client.kickProducer(worker: index) }

    /// The broadcast half of a wave about to be published: an update or end on a linked channel. Its shard is
    /// the channel's (one shard sends all of a channel's broadcasts, so they stay in order). Holding `control`.
    private func broadcastPart(for update: ChannelUpdate, wave: UInt64, in state: ControlState) -> BroadcastPart? {
        guard update.content.event != .start, let link = state.links[update.channel] else { return nil }
        return BroadcastPart(
            channelID: link.channelID, subscribers: state.subscribers[update.channel] ?? 0,
            expiration: link.storagePolicy == 0 ? 0 : update.freshUntil ?? 0, wave: wave,
            shard: Self.broadcastShard(update.channel, shards: shards.count))
    }

    /// The shard that sends a channel's broadcasts (by name: the same after a restart).
    static func broadcastShard(_ channel: String, shards: Int) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a
        for byte in channel.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return Int(hash % UInt64(shards))
    }

    /// `freshUntil` at most this far ahead (s): APNs stores a push up to 30 days (apns-spec.md §2).
    static let longestFreshness: Int64 = 30 * 24 * 3600

    /// Sends one push to one token outside any channel, through the token's shard (lock-free: no control lock).
    /// A registered token's priority-10 budget applies (`.immediate` over budget goes at 5), and a token APNs
    /// reports dead is pruned like in a wave. The result comes back when APNs answered (or the push failed).
    public func push(
        _ content: LiveActivityContent, to token: DeviceToken, priority: PushPriority = .normal,
        expiration: Int64? = nil, collapseID: String? = nil
    ) async throws(PublishError) -> PushResult {
        // Counted while it may enqueue, so `shutdown` can wait for it and then account for it. Sequentially
        // consistent with `shutdown`'s flag exchange and count load: either shutdown sees this count, or this
        // sees the flag.
        enqueuingPushes.add(1, ordering: .sequentiallyConsistent)
        var counted = true
        defer { if counted { enqueuingPushes.subtract(1, ordering: .sequentiallyConsistent) } }
        guard !isShutDown.load(ordering: .sequentiallyConsistent) else { throw .shutDown }
        if let collapseID {
            do { try CollapseID.validate(collapseID) } catch { throw .invalidCollapseID(error) }
        }
        let payload: PushPayload
        do { payload = try PushPayload(liveActivity: content) } catch { throw .invalidPayload(error) }
        let shard = shards[APNsClient.workerIndex(for: token, workerCount: shards.count)]
        let job = PushJob(token: token, payload: payload, priority: priority, expiration: expiration, collapseID: collapseID)
        let outcome: PushResult? = await withCheckedContinuation { continuation in
            let single = SinglePush(job: job) { continuation.resume(returning: $0) }
            // The singles' own queue: full is back-pressure, whatever the publishers do.
            let taken = shard.inbox.enqueueSingle(single)
            if taken { client.kickProducer(worker: shard.index) }
            enqueuingPushes.subtract(1, ordering: .sequentiallyConsistent)
            counted = false
            if !taken { continuation.resume(returning: nil) }
        }
        guard let outcome else { throw .backPressure(shard: shard.index) }
        return outcome
    }

    /// The retained waves (every unfinished one and the newest `retainedWaves` complete ones), oldest first.
    public var waves: [Wave] { history.recent }

    /// A retained wave by id.
    public func wave(id: UInt64) -> Wave? { history.wave(id: id) }

    /// A wave's report: a retained wave's current one, else the final report the wave store kept (waves that
    /// completed before a restart, or that are no longer retained in memory). nil if neither knows it.
    public func report(id: UInt64) throws(FanoutError) -> WaveReport? {
        // Several nodes: no one node's memory has all of a wave; the store has every shard's progress.
        if sharedStore != nil { return try sharedReport(id: id) }
        if let wave = history.wave(id: id) { return wave.report }
        guard let waveStore else { return nil }
        do {
            return try waveStore.waveReport(id: id).map(WaveReport.init(record:))
        } catch {
            throw .registry(error)
        }
    }

    /// The newest `limit` complete reports the wave store kept for this app, newest first (empty without one).
    public func storedReports(limit: Int) throws(FanoutError) -> [WaveReport] {
        guard let waveStore, limit > 0 else { return [] }
        do {
            return try waveStore.waveReports(bundleID: configuration.bundleID, environment: configuration.environment, limit: limit)
                .map(WaveReport.init(record:))
        } catch {
            throw .registry(error)
        }
    }

    /// On the thread that finished the wave's last shard (a worker's): never takes the control lock.
    func waveCompleted(_ wave: Wave) {
        unfinishedWaves.subtract(1, ordering: .acquiringAndReleasing)
        if let checkpointWriter, sharedStore != nil {
            // This node's part is done; the wave is complete once every shard's part is (any node's).
            checkpointWriter.finishShared(wave.id)
        } else if let checkpointWriter {
            checkpointWriter.complete(
                wave.report.record(
                    bundleID: configuration.bundleID, environment: configuration.environment,
                    publishedAt: wave.publishedAtWall, completedAt: Self.wallMilliseconds()))
        }
        guard wave.event == .end else { return }
        // The activities of an ended channel go away after their dismissal window: retire its update tokens.
        // iOS removes an ended activity within the window even if `dismissal-date` is later.
        let latest = configuration.wallClock() + Int64(Self.nanoseconds(configuration.defaultDismissalWindow) / 1_000_000_000)
        let at = min(wave.dismissalDate ?? latest, latest)
        retirements.withLock { $0[wave.channel] = at }
        checkpointWriter?.saveRetirement(channel: wave.channel, dueAt: at)
    }

    /// Per-channel changes of the broadcast subscription counts (the registry's deltas).
    static func apply(_ deltas: [String: Int], to counts: inout [String: Int]) {
        for (channel, delta) in deltas {
            let count = (counts[channel] ?? 0) + delta
            counts[channel] = count > 0 ? count : nil
        }
    }

    static func wallMilliseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    // MARK: - Maintenance

    /// On the registry thread: retires ended channels whose dismissal window passed and activities older than
    /// ActivityKit's lifetime, then forgets channels nothing uses. Also callable directly (tests, operators).
    public func runMaintenance() {
        let now = configuration.wallClock()
        let due = retirements.withLock { pending -> [String] in
            let due = pending.filter { $0.value <= now }.map(\.key)
            for channel in due { pending[channel] = nil }
            return due
        }
        for channel in due {
            do {
                let retired = try store.retire(following: channel)
                control.withLock { state in
                    Self.apply(retired.subscriptionDeltas, to: &state.subscribers)
                    guard !isShutDown.load(ordering: .acquiring), let id = state.channels.id(of: channel) else { return }
                    let sequence = state.nextSequence
                    state.nextSequence += 1
                    _ = state.channels.mention(channel, sequence: sequence)
                    for shard in shards { enqueueWaiting(.retireChannel(id), shard: shard.index) }
                }
            } catch {
                registryWorker.noteError("retiring channel \(channel): \(error)")
            }
        }
        for channel in due { scheduleLinkRemoval(channel, dueAt: now) }
        removeDueLinks(now: now)
        if let waveStore {
            do {
                if !due.isEmpty {
                    try waveStore.removeRetirements(bundleID: configuration.bundleID, environment: configuration.environment, channels: due)
                }
                try waveStore.pruneWaveReports(keeping: configuration.storedWaveReports)
            } catch {
                registryWorker.noteError("durable waves: maintenance of the wave store: \(error)")
            }
        }
        let lifetime = Int64(Self.nanoseconds(configuration.activityLifetime) / 1_000_000)
        do {
            let old = try store.retire(createdBefore: now * 1000 - lifetime)
            if !old.subscriptionDeltas.isEmpty { control.withLock { Self.apply(old.subscriptionDeltas, to: &$0.subscribers) } }
            if !old.tokens.isEmpty { applyRemoval(old.tokens) }
        } catch {
            registryWorker.noteError("retiring old activities: \(error)")
        }
        forgetUnusedChannels()
    }

    /// Asks every shard which channels it still uses and forgets the others (their ids are reused). Waits
    /// for the shards' answers (they come within a loop iteration); returns how many channels were forgotten.
    @discardableResult
    public func forgetUnusedChannels() -> Int {
        sweeping.withLock { _ in
            let sweep: ChannelSweep? = control.withLock { state in
                guard !isShutDown.load(ordering: .acquiring) else { return nil }
                let sweep = ChannelSweep(sequence: state.nextSequence, shards: shards.count)
                state.nextSequence += 1
                for shard in shards { enqueueWaiting(.sweepChannels(sweep), shard: shard.index) }
                return sweep
            }
            guard let sweep else { return 0 }
            // Shards answer within a loop iteration; after a shutdown, `abandonAfterStop` answers for them.
            let deadline = monotonicNow() &+ 30_000_000_000
            while !sweep.isAnswered {
                if monotonicNow() > deadline { return 0 }
                usleep(500)
            }
            return control.withLock { state in state.channels.forget(after: sweep) }
        }
    }

    // MARK: - Channels

    /// What the engine knows of a channel now: its live audience (as the next wave would target it), the
    /// newest timestamp published, and its unfinished waves. Asks every shard through its queue (they answer
    /// within a loop iteration); nil if the engine is shut down or the shards did not answer within `timeout`.
    public func channelSummary(_ name: String, timeout: Duration = .seconds(5)) async -> ChannelSummary? {
        await channelSummaries(of: [name], timeout: timeout)?.first
    }

    /// `channelSummary` for every channel the engine tracks now (followed by a token, or named by a wave since
    /// the last sweep), sorted by name; one question to each shard for all of them.
    public func channelSummaries(timeout: Duration = .seconds(5)) async -> [ChannelSummary]? {
        await channelSummaries(of: nil, timeout: timeout)
    }

    private func channelSummaries(of requested: [String]?, timeout: Duration) async -> [ChannelSummary]? {
        let asked: (summaries: [ChannelSummary], census: ChannelCensus?, positions: [Int])? = control.withLock { state in
            guard !isShutDown.load(ordering: .acquiring) else { return nil }
            let names = requested ?? state.channels.names
            var summaries: [ChannelSummary] = []
            var ids: [UInt16] = []
            var positions: [Int] = []
            for name in names {
                summaries.append(ChannelSummary(channel: name, latestTimestamp: state.latest[name] ?? state.channels.latestTimestamp(of: name)))
                if let id = state.channels.id(of: name) {
                    ids.append(id)
                    positions.append(summaries.count - 1)
                }
            }
            guard !ids.isEmpty else { return (summaries, nil, []) }
            let census = ChannelCensus(channels: ids, shards: shards.count)
            for shard in shards { enqueueWaiting(.countAudience(census), shard: shard.index) }
            return (summaries, census, positions)
        }
        guard var summaries = asked?.summaries else { return nil }
        let live = history.recent.filter { !$0.isComplete }
        for index in summaries.indices {
            summaries[index].liveWaves = live.filter { $0.channel == summaries[index].channel }
        }
        guard let census = asked?.census, let positions = asked?.positions else { return summaries }
        let deadline = monotonicNow() &+ Self.nanoseconds(timeout)
        while !census.isAnswered {
            if monotonicNow() > deadline || isShutDown.load(ordering: .acquiring) { return nil }
            try? await Task.sleep(for: .microseconds(200))
        }
        for (position, counts) in zip(positions, census.totals) {
            summaries[position].updateTokens = counts.update
            summaries[position].pushToStartTokens = counts.pushToStart
        }
        return summaries
    }

    /// The channels the engine tracks now (followed by a token, or named by a wave since the last sweep).
    public var channelNames: [String] { control.withLock { $0.channels.names } }

    // MARK: - The invalid-token breaker

    /// `.open` while the engine holds back deletions because APNs called too many tokens bad at once.
    public var breakerState: InvalidTokenBreakerState { breaker.state }

    /// Closes an open breaker (operator). `pruneHeldTokens`: the held tokens really are dead, remove them;
    /// false: keep them (their waves count the failure with APNs' reason). Paused waves resume either way.
    /// Returns false if the breaker was closed.
    @discardableResult
    public func resetBreaker(pruneHeldTokens: Bool = false) -> Bool {
        guard breaker.close(pruneHeldTokens: pruneHeldTokens) else { return false }
        control.withLock { _ in
            guard !isShutDown.load(ordering: .acquiring) else { return }
            for shard in shards { enqueueWaiting(.resumeAfterBreaker(pruneHeldTokens: pruneHeldTokens), shard: shard.index) }
        }
        return true
    }

    // MARK: - State

    public var statistics: FanoutStatistics {
        var stats = FanoutStatistics(client: client.statistics)
        stats.invalidationsPersisted = registryWorker.persisted.load(ordering: .relaxed)
        stats.invalidationsKept = registryWorker.keptAfterReRegistration.load(ordering: .relaxed)
        stats.registryErrors = registryWorker.storageErrors.load(ordering: .relaxed)
        stats.lastRegistryError = registryWorker.lastError
        stats.lastConnectionError = client.lastConnectionError
        stats.invalidTokensHeld = shards.reduce(0) { $0 + $1.heldCount.load(ordering: .relaxed) }
        stats.registrationsRefused = shards.reduce(0) { $0 + $1.registrationsRefused.load(ordering: .relaxed) }
        stats.breaker = breaker.state
        stats.unfinishedWaves = unfinishedWaves.load(ordering: .relaxed)
        stats.checkpointWrites = checkpointWriter?.writes.load(ordering: .relaxed) ?? 0
        stats.checkpointErrors = checkpointWriter?.errors.load(ordering: .relaxed) ?? 0
        stats.lastCheckpointError = checkpointWriter?.lastError
        stats.channelsInUse = control.withLock { $0.channels.count }
        stats.queuedCommands = shards.reduce(0) { $0 + $1.inbox.queuedCount }
        return stats
    }

    /// Stops the workers; every wave completes (outcomes still open end as failed: Shutdown) and every
    /// invalidation already reported is written to the registry. A `publish`, `register` or `push` racing it
    /// either is refused with `.shutDown` or gets its outcome.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        channelManager?.shutdown()
        // Control commands are queued under the lock after checking the flag: once we have held it, no more come.
        control.withLock { _ in }
        while enqueuingPushes.load(ordering: .sequentiallyConsistent) > 0 { usleep(100) }
        guard let checkpointWriter else {
            client.shutdown()
            for shard in shards { shard.abandonAfterStop() }
            registryWorker.stop()
            return
        }
        // Durable waves: send no more wave pushes, let the ones out be answered (so none is resent), then record
        // where every unfinished wave is. The next engine on the store resumes them.
        for shard in shards {
            shard.stopWavesRequested.store(true, ordering: .relaxed)
            shard.inFlight.store(-1, ordering: .relaxed)
            client.kickProducer(worker: shard.index)
        }
        let deadline = monotonicNow() &+ Self.nanoseconds(configuration.shutdownDrainTimeout)
        while shards.contains(where: { $0.inFlight.load(ordering: .relaxed) != 0 }) && monotonicNow() < deadline {
            for shard in shards { client.kickProducer(worker: shard.index) }
            usleep(1000)
        }
        client.shutdown()
        checkpointWriter.stop()  // after what shards handed it is written
        checkpointWriter.kick = nil  // the workers are gone
        var final: [WaveCheckpoint] = []
        for shard in shards { final += shard.checkpointAfterStop() }
        // Then what the shards' last service handed over (a wave that completed there) and the last checkpoints.
        if !checkpointWriter.writeRemaining(final) {
            configuration.logger.error(
                "durable waves: the last checkpoints could not be written (\(checkpointWriter.lastError ?? "?")); the next start resumes from earlier ones")
        }
        for wave in history.recent where !wave.isComplete { wave.interrupt() }
        registryWorker.stop()
    }

    /// `shutdown()` from an async caller: the drain and the last checkpoints are waited for on a thread of their
    /// own, so the caller's cooperative thread is free meanwhile.
    public func shutdown() async {
        await BlockingHandOff.run(name: "fanout-stop") { self.shutdown() }
    }

    /// Tests: leaves the store as a crash (kill -9) would. The checkpoint thread stops writing at once, the
    /// workers stop, and nothing is accounted or checkpointed any more: the waves stay unfinished in memory and
    /// in the store, at their last durable checkpoints.
    func abandonForTesting() {
        guard !isShutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        control.withLock { _ in }
        while enqueuingPushes.load(ordering: .sequentiallyConsistent) > 0 { usleep(100) }
        checkpointWriter?.abandon()
        client.shutdown()
        registryWorker.stop()
    }

    /// Tokens loaded per shard and bytes of shard memory (after shutdown, or for tests; reads shard state).
    public var shardFootprint: [(tokens: Int, bytes: Int)] {
        shards.map { ($0.tokens.aliveCount, $0.memoryBytes) }
    }
}

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

/// Sends each result to the shard that owns its token, on the worker thread that finished it (the same one).
final class ResultRouter: PushResultHandler, @unchecked Sendable {
    private let shards: [Shard]
    private let observer: (@Sendable (PushResult) -> Void)?
    init(shards: [Shard], observer: (@Sendable (PushResult) -> Void)?) {
        self.shards = shards
        self.observer = observer
    }

    func pushCompleted(_ result: PushResult) {
        observer?(result)
        shards[result.worker].pushCompleted(result, now: monotonicNow())
    }

    func pushCompleted(inPlace completion: borrowing PushCompletion) {
        guard observer == nil else {
            pushCompleted(completion.result)
            return
        }
        shards[completion.worker].pushCompleted(completion, now: monotonicNow())
    }
}

/// Lets the registry thread reach the engine without keeping it alive.
private final class RetirementBox: @unchecked Sendable {
    weak var engine: FanoutEngine?
}

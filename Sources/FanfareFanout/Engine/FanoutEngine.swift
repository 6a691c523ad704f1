import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
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
            return
                "no channel management configured (FanoutConfiguration.channelManagement): the engine cannot create or delete APNs broadcast channels"
        case .broadcast(let error): return "APNs channel management: \(error)"
        case .environmentMismatch(let host, let hostEnvironment, let environment):
            let right =
                FanoutConfiguration.apnsHosts.first { $0.value == environment && !$0.key.contains("development") }?.key
                ?? "?"
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
    let client: APNsClient
    let store: TokenStore
    let waveStore: (any WaveStore)?
    let registryWorker: RegistryWorker
    private let router: ResultRouter
    let breaker: InvalidTokenBreaker
    let history: WaveHistory
    /// Writes checkpoints, final reports and retirements when the engine has a wave store.
    let checkpointWriter: CheckpointWriter?
    let control: Mutex<ControlState>
    /// Pending retirements have their own lock: wave completions (on worker threads) add to them, and a worker
    /// must never wait for the control lock (its holder may be waiting for that worker's queue to drain).
    private let retirements = Mutex<[String: Int64]>([:])
    /// One channel sweep at a time.
    private let sweeping = Mutex<Void>(())
    let isShutDown = Atomic<Bool>(false)
    let enqueuingPushes = Atomic<Int>(0)
    /// Posted by the last of them to finish once the engine is shut down (`waitForEnqueuingPushes`).
    let enqueuingDone = ThreadSignal()
    /// Published waves not complete yet (refused past `maximumUnfinishedWaves`).
    let unfinishedWaves = Atomic<Int>(0)
    /// Registrations from the registry refused because their channels did not fit (`fill`).
    let channelRefusals = Atomic<Int>(0)
    /// Where broadcast links are kept (the token store, when it is a `BroadcastLinkStore`); nil: in memory only.
    let linkStore: (any BroadcastLinkStore)?
    /// Creates and deletes APNs broadcast channels (`FanoutConfiguration.channelManagement`).
    let channelManager: BroadcastChannelManager?
    /// Leased shards (several nodes): the shared store, and the wave feed's position (FanoutEngine+LeasedShards).
    let sharedStore: (any SharedWaveStore)?
    let feed: Mutex<WaveFeedState>
    /// Names this engine in claims other nodes see (the deletion of a channel's APNs channel).
    let claimant = "engine-" + String(UInt64.random(in: 1...UInt64.max), radix: 36)

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
            topic: configuration.client.topic, environment: configuration.environment,
            wallClock: configuration.wallClock)
        self.breaker = breaker
        history = WaveHistory(
            retained: configuration.retainedWaves,
            maximumAge: configuration.retainedWaveAge.map { Self.nanoseconds($0) })
        let retirement = RetirementBox()
        let registryWorker = RegistryWorker(
            store: store, maintenanceInterval: configuration.maintenanceInterval, onInvalidation: onInvalidation,
            logger: configuration.logger, metrics: configuration.metricsFactory,
            maintenance: { retirement.engine?.runMaintenance() })
        self.registryWorker = registryWorker
        let shards = Self.makeShards(configuration, invalidations: registryWorker, breaker: breaker)
        self.shards = shards
        sharedStore = try Self.sharedWaveStore(waveStore, of: shards, configuration: configuration)
        var controlState = try Self.loadControlState(from: store, into: shards, configuration: configuration)
        linkStore = store as? any BroadcastLinkStore
        // One key rotation for the push client and channel management (`rotateProviderKey`).
        let providerKeys = ProviderKeyRotation(configuration.client.providerTokens)
        channelManager = try Self.makeChannelManager(
            configuration.channelManagement.map { management in
                var management = management
                management.providerKeys = providerKeys
                return management
            })
        var unfinished: [UnfinishedWave] = []
        if let waveStore {
            let waves = try Self.openWaveStore(
                waveStore, of: shards, configuration: configuration, into: &controlState)
            checkpointWriter = waves.writer
            retirements.withLock { $0 = waves.retirements }
            unfinished = waves.unfinished
        } else {
            checkpointWriter = nil
        }
        feed = Mutex(
            WaveFeedState(lastWave: controlState.nextWaveID - 1, heldSince: Array(repeating: nil, count: shards.count)))
        control = Mutex(controlState)
        let router = ResultRouter(shards: shards, observer: configuration.onPushResult)
        self.router = router
        client = try Self.makeClient(
            configuration, resultHandler: router, producers: shards, providerKeys: providerKeys)
        retirement.engine = self
        startWorkers(resuming: unfinished)
    }

    /// The engine is whole: the threads that act on their own start (checkpoints, the registry's maintenance),
    /// and the waves an earlier engine left unfinished go on.
    private func startWorkers(resuming unfinished: [UnfinishedWave]) {
        if let checkpointWriter {
            let client = client
            checkpointWriter.kick = { shard in client.kickProducer(worker: shard) }
            checkpointWriter.start()
        }
        registryWorker.start()
        if !unfinished.isEmpty { resume(unfinished) }
    }

    deinit { shutdown() }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        let whole = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if whole.overflow { return .max }
        return whole.partialValue.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000)).partialValue
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
    public func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription]
    )
        throws(FanoutError) -> RegistrationResult
    {
        try Self.register(registrations, subscriptions: subscriptions, on: [self])
    }

    /// Removes tokens from the registry (durably) and the shards. Returns how many were registered.
    @discardableResult
    public func unregister(_ tokens: [DeviceToken]) throws(FanoutError) -> Int {
        try Self.unregister(tokens, on: [self])
    }

    /// This engine's app in its environment: what its registry calls may touch (one registry serves every app).
    public var scope: RegistryScope { .app(configuration.bundleID, configuration.environment) }

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

    /// Durable work already happened, so the command must get through: waits for room (`ShardInbox`). Holding
    /// `control`, after checking the engine is not shut down (so the workers still drain).
    func enqueueWaiting(_ command: ShardCommand, shard index: Int) {
        let shard = shards[index]
        shard.inbox.waitForControlRoom()
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
        try Self.publish(update, on: [self])[0]
    }

    /// What `publish` works out before taking the control lock: the encoded payload, the deadline, the kick-off.
    struct PreparedPublish {
        var payload: PushPayload
        var kickOff: (payload: PushPayload?, link: BroadcastChannelID?)
        var publishedAt: UInt64
        var deadline: UInt64
    }

    /// Checks and encodes `update` for this engine (outside the control lock).
    func prepare(_ update: ChannelUpdate) throws(PublishError) -> PreparedPublish {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        guard sharedStore == nil else { throw .sharedStore }
        let (payload, freshFor) = try validated(update)
        let publishedAt = monotonicNow()
        let deadline = freshFor.map { publishedAt &+ UInt64($0) * 1_000_000_000 } ?? 0
        let kickOff = try kickOffPayload(for: update, link: control.withLock { $0.links[update.channel]?.channelID })
        return PreparedPublish(payload: payload, kickOff: kickOff, publishedAt: publishedAt, deadline: deadline)
    }

    /// A wave admitted under the control lock, numbered, not started yet: its durable record, then `start`.
    struct AdmittedWave {
        var id: UInt64
        var broadcast: BroadcastPart?
        var channelPayload: PushPayload?
        var publishedAtWall: Int64
        var record: WaveRecord
    }

    /// Admits `update` (latest state wins, room on every shard) and numbers its wave. Holding `control`.
    func admitWave(
        _ update: ChannelUpdate, prepared: PreparedPublish, in state: inout ControlState
    ) throws(PublishError) -> AdmittedWave {
        guard !isShutDown.load(ordering: .acquiring) else { throw .shutDown }
        try admit(update, in: state)
        let id = configuration.waveNumbering?.take() ?? state.nextWaveID
        let publishedAtWall = Self.wallMilliseconds()
        let broadcast = broadcastPart(for: update, wave: id, in: state)
        // The kick-off variant only if the link did not change since it was encoded.
        let kickOff = prepared.kickOff
        let channelPayload =
            kickOff.link != nil && kickOff.link == state.links[update.channel]?.channelID ? kickOff.payload : nil
        let record = WaveRecord(
            id: id, bundleID: configuration.bundleID, environment: configuration.environment,
            channel: update.channel, event: update.content.event.rawValue, timestamp: update.content.timestamp,
            priority: update.priority.rawValue, hasAlert: update.hasAlert,
            payload: Array(prepared.payload.bytes), freshUntil: update.freshUntil, collapseID: update.collapseID,
            dismissalDate: update.content.dismissalDate, publishedAt: publishedAtWall, shardCount: shards.count,
            startKeys: [], broadcastChannelID: broadcast?.channelID.description,
            channelPayload: channelPayload.map { Array($0.bytes) })
        return AdmittedWave(
            id: id, broadcast: broadcast, channelPayload: channelPayload, publishedAtWall: publishedAtWall,
            record: record)
    }

    /// Starts an admitted wave once it is durable. Holding `control`.
    func start(
        _ admitted: AdmittedWave, update: ChannelUpdate, prepared: PreparedPublish, in state: inout ControlState
    ) -> Wave {
        startWave(
            update, id: admitted.id, payload: prepared.payload, channelPayload: admitted.channelPayload,
            broadcast: admitted.broadcast, deadline: prepared.deadline, publishedAt: prepared.publishedAt,
            publishedAtWall: admitted.publishedAtWall, in: &state)
    }

    /// A kick-off on a channel linked to `link`: iOS 18+ devices get `input-push-channel` (their activity then
    /// follows the channel's broadcasts). Encoded outside the lock; nil payload: no such variant.
    func kickOffPayload(
        for update: ChannelUpdate, link: BroadcastChannelID?
    ) throws(PublishError) -> (payload: PushPayload?, link: BroadcastChannelID?) {
        guard update.content.event == .start, let link else { return (nil, nil) }
        var content = update.content
        content.inputPushChannel = link.description
        do { return (try PushPayload(liveActivity: content), link) } catch { throw .invalidPayload(error) }
    }

    /// Whether a wave on `update`'s channel may start now: latest state wins, the channel fits, the unfinished
    /// waves are under their limit and every shard has room. Holding `control`.
    func admit(_ update: ChannelUpdate, in state: ControlState) throws(PublishError) {
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
        // Room checked here is room at the enqueue in `startWave`, on every shard or none (`ShardInbox`).
        for shard in shards where !shard.inbox.hasControlRoom {
            throw .backPressure(shard: shard.index)
        }
    }

    /// Numbers the admitted wave, records the channel's newest timestamp and hands the wave to every shard.
    /// Holding `control`, after `admit`.
    private func startWave(
        _ update: ChannelUpdate, id: UInt64, payload: PushPayload, channelPayload: PushPayload?,
        broadcast: BroadcastPart?, deadline: UInt64, publishedAt: UInt64, publishedAtWall: Int64,
        in state: inout ControlState
    ) -> Wave {
        let sequence = state.nextSequence
        state.nextSequence += 1
        let channel = state.channels.mention(update.channel, sequence: sequence)
        state.channels.setLatestTimestamp(update.content.timestamp, of: channel)
        state.latest[update.channel] = max(state.latest[update.channel] ?? .min, update.content.timestamp)
        let wave = Wave(
            id: id, update: update, shardCount: shards.count, publishedAt: publishedAt,
            breaker: breaker,
            publishedAtWall: publishedAtWall, broadcast: broadcast,
            onComplete: { [weak self] wave in self?.waveCompleted(wave) })
        state.nextWaveID = max(state.nextWaveID, id + 1)
        let published = PublishedUpdate(
            wave: wave, update: update, channel: channel, sequence: sequence, payload: payload, deadline: deadline,
            channelPayload: channelPayload)
        unfinishedWaves.add(1, ordering: .acquiringAndReleasing)
        history.append(wave)
        for shard in shards { enqueueControl(.publish(published), shard: shard) }
        return wave
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
        defer { if counted { enqueueFinished() } }
        guard !isShutDown.load(ordering: .sequentiallyConsistent) else { throw .shutDown }
        if let collapseID {
            do { try CollapseID.validate(collapseID) } catch { throw .invalidCollapseID(error) }
        }
        let payload: PushPayload
        do { payload = try PushPayload(liveActivity: content) } catch { throw .invalidPayload(error) }
        let shard = shards[APNsClient.workerIndex(for: token, workerCount: shards.count)]
        // Several nodes: only the holder of the shard's lease sends to its tokens (its connections hold a push
        // of a shard not held until a lease comes): refused at once, so the caller tries the holder.
        if sharedStore != nil, !control.withLock({ $0.held[shard.index] }) {
            throw .shardElsewhere(shard: shard.index)
        }
        let job = PushJob(
            token: token, payload: payload, priority: priority, expiration: expiration, collapseID: collapseID)
        let outcome: PushResult? = await withCheckedContinuation { continuation in
            let single = SinglePush(job: job) { continuation.resume(returning: $0) }
            // The singles' own queue: full is back-pressure, whatever the publishers do.
            let taken = shard.inbox.enqueueSingle(single)
            if taken { client.kickProducer(worker: shard.index) }
            enqueueFinished()
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
    /// completed before a restart, or that are no longer retained in memory). nil if neither knows it, or if it is
    /// a wave of another app or environment (one store keeps every app's waves).
    public func report(id: UInt64) throws(FanoutError) -> WaveReport? {
        // Several nodes: no one node's memory has all of a wave; the store has every shard's progress.
        if sharedStore != nil { return try sharedReport(id: id) }
        if let wave = history.wave(id: id) { return wave.report }
        guard let waveStore else { return nil }
        do {
            guard let record = try waveStore.waveReport(id: id),
                record.bundleID == configuration.bundleID && record.environment == configuration.environment
            else { return nil }
            return WaveReport(record: record)
        } catch {
            throw .registry(error)
        }
    }

    /// The newest `limit` complete reports the wave store kept for this app, newest first (empty without one).
    public func storedReports(limit: Int) throws(FanoutError) -> [WaveReport] {
        guard let waveStore, limit > 0 else { return [] }
        do {
            return try waveStore.waveReports(
                bundleID: configuration.bundleID, environment: configuration.environment, limit: limit
            )
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
        let latest =
            configuration.wallClock() + Int64(Self.nanoseconds(configuration.defaultDismissalWindow) / 1_000_000_000)
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
                let retired = try store.retire(following: channel, in: scope)
                control.withLock { state in
                    Self.apply(retired.subscriptionDeltas, to: &state.subscribers)
                    guard !isShutDown.load(ordering: .acquiring), let id = state.channels.id(of: channel) else {
                        return
                    }
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
                    try waveStore.removeRetirements(
                        bundleID: configuration.bundleID, environment: configuration.environment, channels: due)
                }
                try waveStore.pruneWaveReports(keeping: configuration.storedWaveReports)
            } catch {
                registryWorker.noteError("durable waves: maintenance of the wave store: \(error)")
            }
        }
        let lifetime = Int64(Self.nanoseconds(configuration.activityLifetime) / 1_000_000)
        do {
            let old = try store.retire(createdBefore: now * 1000 - lifetime, in: scope)
            if !old.subscriptionDeltas.isEmpty {
                control.withLock { Self.apply(old.subscriptionDeltas, to: &$0.subscribers) }
            }
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
            guard sweep.answers.wait(until: monotonicNow() &+ 30_000_000_000) else { return 0 }
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
        let asked: (summaries: [ChannelSummary], census: ChannelCensus?, positions: [Int])? = control.withLock {
            state in
            guard !isShutDown.load(ordering: .acquiring) else { return nil }
            let names = requested ?? state.channels.names
            var summaries: [ChannelSummary] = []
            var ids: [UInt16] = []
            var positions: [Int] = []
            for name in names {
                summaries.append(
                    ChannelSummary(
                        channel: name, latestTimestamp: state.latest[name] ?? state.channels.latestTimestamp(of: name)))
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
        guard await census.answers.wait(timeout: timeout) else { return nil }
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
            for shard in shards {
                enqueueWaiting(.resumeAfterBreaker(pruneHeldTokens: pruneHeldTokens), shard: shard.index)
            }
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
        stats.registrationsRefusedForChannels = channelRefusals.load(ordering: .relaxed)
        stats.breaker = breaker.state
        stats.unfinishedWaves = unfinishedWaves.load(ordering: .relaxed)
        stats.checkpointWrites = checkpointWriter?.writes.load(ordering: .relaxed) ?? 0
        stats.checkpointErrors = checkpointWriter?.errors.load(ordering: .relaxed) ?? 0
        stats.lastCheckpointError = checkpointWriter?.lastError
        stats.channelsInUse = control.withLock { $0.channels.count }
        stats.queuedCommands = shards.reduce(0) { $0 + $1.inbox.queuedCount }
        return stats
    }

    /// Tokens loaded per shard and bytes of shard memory (after shutdown, or for tests; reads shard state).
    public var shardFootprint: [(tokens: Int, bytes: Int)] {
        shards.map { ($0.tokens.aliveCount, $0.memoryBytes) }
    }
}

/// Lets the registry thread reach the engine without keeping it alive.
private final class RetirementBox: @unchecked Sendable {
    weak var engine: FanoutEngine?
}

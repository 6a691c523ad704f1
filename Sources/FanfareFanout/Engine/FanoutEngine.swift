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
    /// A shard holds at most `FanoutEngine.maximumChannels` channels (15 bits of a push cookie).
    case tooManyChannels(limit: Int)

    public var description: String {
        switch self {
        case .registry(let error): return "\(error)"
        case .wrongApp(let index, let bundleID, let environment):
            return "registration #\(index) is for \(bundleID) (\(environment)); this engine serves another app"
        case .shutDown: return "the engine is shut down"
        case .client(let message): return "could not start the APNs client: \(message)"
        case .tooManyChannels(let limit):
            return "more than \(limit) channels since the engine started; a channel no token follows any more is "
                + "forgotten at the next start (end it and let retirement remove its tokens, then restart)"
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
    private let store: TokenStore
    private let registryWorker: RegistryWorker
    private let router: ResultRouter
    private let control = Mutex(ControlState())
    private let isShutDown = Atomic<Bool>(false)
    private let enqueuingPushes = Atomic<Int>(0)

    /// Channels one engine tracks (every shard knows every channel it has seen).
    public static let maximumChannels = FanoutCookie.maximumWaves

    private struct ControlState {
        /// Every channel a registration or publish has named, to refuse the one past `maximumChannels`.
        var channels: Set<String> = []
        var nextWaveID: UInt64 = 1
        var nextSequence: UInt64 = 1
        /// The newest timestamp published per channel (older updates are refused).
        var latestTimestamp: [String: Int64] = [:]
        var waves: [Wave] = []
        /// Channels whose `end` went out: retire their update tokens at this UNIX time.
        var pendingRetirements: [(channel: String, at: Int64)] = []
    }

    /// Loads the app's tokens from `store` into the shards, then starts the workers.
    /// - Parameter onInvalidation: called on the registry thread after a dead token was durably removed.
    public init(
        configuration: FanoutConfiguration, store: TokenStore,
        onInvalidation: (@Sendable (InvalidationReport) -> Void)? = nil
    ) throws(FanoutError) {
        precondition(configuration.client.workerCount > 0)
        precondition(configuration.commandQueueCapacity > 2 * Self.controlReserve, "commandQueueCapacity is too small")
        self.configuration = configuration
        self.store = store
        let retirement = RetirementBox()
        let registryWorker = RegistryWorker(
            store: store, maintenanceInterval: configuration.maintenanceInterval, onInvalidation: onInvalidation,
            maintenance: { retirement.engine?.runMaintenance() })
        self.registryWorker = registryWorker
        let settings = ShardSettings(
            standardBudget: configuration.standardBudget, frequentBudget: configuration.frequentBudget,
            minimumInterval: configuration.minimumInterval.map { Self.nanoseconds($0) } ?? 0,
            retryDelays: configuration.retryDelays.map { Self.nanoseconds($0) })
        let shards = (0..<configuration.client.workerCount).map {
            Shard(index: $0, settings: settings, commandCapacity: configuration.commandQueueCapacity, invalidations: registryWorker)
        }
        self.shards = shards
        let loadedChannels = try Self.load(from: store, into: shards, configuration: configuration)
        control.withLock { $0.channels = loadedChannels }
        router = ResultRouter(shards: shards, observer: configuration.onPushResult)
        do {
            client = try APNsClient(configuration: configuration.client, resultHandler: router, producers: shards)
        } catch {
            throw .client("\(error)")
        }
        retirement.engine = self
        registryWorker.start()
    }

    deinit { shutdown() }

    /// Fills the shards; returns the channels seen.
    private static func load(
        from store: TokenStore, into shards: [Shard], configuration: FanoutConfiguration
    ) throws(FanoutError) -> Set<String> {
        let shardCount = shards.count
        var channels = Set<String>()
        var tooMany = false
        do {
            // Room for everything in the store up front (an upper bound: other apps' tokens are counted too).
            let expected = try store.count()
            for shard in shards { shard.reserve(tokens: expected / shardCount + expected / (shardCount * 16) + 16) }
            try store.forEachRegistration(bundleID: configuration.bundleID, environment: configuration.environment) {
                registration in
                for channel in registration.channels where !channels.contains(channel) {
                    guard channels.count < maximumChannels else {
                        tooMany = true
                        return
                    }
                    channels.insert(channel)
                }
                guard !tooMany else { return }
                let shard = shards[APNsClient.workerIndex(for: registration.token, workerCount: shardCount)]
                shard.register(Self.entry(registration))
            }
        } catch {
            throw .registry(error)
        }
        if tooMany { throw .tooManyChannels(limit: maximumChannels) }
        return channels
    }

    /// Holding `control`: admits `names` to the channel set, or refuses all of them.
    private static func admitChannels(_ names: some Sequence<String>, into state: inout ControlState) -> Bool {
        let new = Set(names).subtracting(state.channels)
        guard state.channels.count + new.count <= maximumChannels else { return false }
        state.channels.formUnion(new)
        return true
    }

    static func entry(_ registration: TokenRegistration) -> RegistrationBatch.Entry {
        RegistrationBatch.Entry(
            token: registration.token, pushToStart: registration.kind == .pushToStart,
            frequentUpdates: registration.frequentUpdates,
            registeredAt: UInt32(clamping: registration.lastSeenAt / 1000), channels: registration.channels)
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
    }

    // MARK: - Registration

    /// Registers (or refreshes) tokens: durable in the registry when this returns, then applied to the shards.
    public func register(_ registrations: [TokenRegistration]) throws(FanoutError) {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        for (index, registration) in registrations.enumerated()
        where registration.bundleID != configuration.bundleID || registration.environment != configuration.environment {
            throw .wrongApp(index: index, bundleID: registration.bundleID, environment: registration.environment)
        }
        let admitted = control.withLock { Self.admitChannels(registrations.lazy.flatMap(\.channels), into: &$0) }
        guard admitted else { throw .tooManyChannels(limit: Self.maximumChannels) }
        do { try store.register(registrations) } catch { throw .registry(error) }
        var perShard = Array(repeating: [RegistrationBatch.Entry](), count: shards.count)
        for registration in registrations {
            perShard[APNsClient.workerIndex(for: registration.token, workerCount: shards.count)].append(Self.entry(registration))
        }
        control.withLock { _ in
            for (index, entries) in perShard.enumerated() where !entries.isEmpty {
                enqueueWaiting(.register(RegistrationBatch(entries)), shard: index)
            }
        }
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

    private func applyRemoval(_ tokens: [DeviceToken]) {
        var perShard = Array(repeating: [DeviceToken](), count: shards.count)
        for token in tokens { perShard[APNsClient.workerIndex(for: token, workerCount: shards.count)].append(token) }
        control.withLock { _ in
            for (index, batch) in perShard.enumerated() where !batch.isEmpty {
                enqueueWaiting(.unregister(TokenBatch(batch)), shard: index)
            }
        }
    }

    /// Durable work already happened, so the command must get through: wait for room (shards drain their
    /// queues every loop iteration, so this waits only under a burst of control traffic). Holding `control`.
    private func enqueueWaiting(_ command: ShardCommand, shard index: Int) {
        while !shards[index].commands.enqueue(command) {
            usleep(200)
        }
        client.kickProducer(worker: index)
    }

    // MARK: - Publishing

    /// Starts a wave: encodes the update once and hands it to every shard. Returns at once; the `Wave` counts
    /// its progress and completes when every targeted token has its outcome.
    public func publish(_ update: ChannelUpdate) throws(PublishError) -> Wave {
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        guard !update.channel.isEmpty else { throw .emptyChannel }
        if let collapseID = update.collapseID, collapseID.utf8.count > 64 {
            throw .collapseIDTooLong(bytes: collapseID.utf8.count)
        }
        let wallNow = configuration.wallClock()
        if let freshUntil = update.freshUntil, freshUntil <= wallNow {
            throw .alreadyExpired(freshUntil: freshUntil, now: wallNow)
        }
        let payload: PushPayload
        do { payload = try PushPayload(liveActivity: update.content) } catch { throw .invalidPayload(error) }
        let publishedAt = monotonicNow()
        let deadline = update.freshUntil.map { publishedAt &+ UInt64($0 - wallNow) * 1_000_000_000 } ?? 0

        return try control.withLock { state throws(PublishError) -> Wave in
            if let current = state.latestTimestamp[update.channel], update.content.timestamp < current {
                throw .olderThanCurrent(channel: update.channel, timestamp: update.content.timestamp, current: current)
            }
            guard Self.admitChannels(CollectionOfOne(update.channel), into: &state) else {
                throw .tooManyChannels(limit: Self.maximumChannels)
            }
            // Every command producer holds this lock, so checking room first means either every shard takes
            // the update or none does (the shards only ever make room meanwhile).
            for shard in shards where shard.commands.approximateCount >= shard.commands.capacity - 1 {
                throw .backPressure(shard: shard.index)
            }
            let wave = Wave(
                id: state.nextWaveID, update: update, shardCount: shards.count, publishedAt: publishedAt,
                onComplete: { [weak self] wave in self?.waveCompleted(wave) })
            state.nextWaveID += 1
            let published = PublishedUpdate(
                wave: wave, update: update, sequence: state.nextSequence, payload: payload, deadline: deadline)
            state.nextSequence += 1
            state.latestTimestamp[update.channel] = update.content.timestamp
            state.waves.append(wave)
            for shard in shards {
                let taken = shard.commands.enqueue(.publish(published))
                precondition(taken, "a shard queue filled up while the control lock was held")
                client.kickProducer(worker: shard.index)
            }
            return wave
        }
    }

    /// Sends one push to one token outside any channel, through the token's shard (lock-free: no control lock).
    /// A registered token's priority-10 budget applies (`.immediate` over budget goes at 5), and a token APNs
    /// reports dead is pruned like in a wave. The result comes back when APNs answered (or the push failed).
    public func push(
        _ content: LiveActivityContent, to token: DeviceToken, priority: PushPriority = .normal,
        expiration: Int64? = nil, collapseID: String? = nil
    ) async throws(PublishError) -> PushResult {
        // Counted while it may enqueue, so `shutdown` can wait for it and then account for it.
        enqueuingPushes.add(1, ordering: .acquiringAndReleasing)
        var counted = true
        defer { if counted { enqueuingPushes.subtract(1, ordering: .acquiringAndReleasing) } }
        guard !isShutDown.load(ordering: .acquiring) else { throw .shutDown }
        if let collapseID, collapseID.utf8.count > 64 { throw .collapseIDTooLong(bytes: collapseID.utf8.count) }
        let payload: PushPayload
        do { payload = try PushPayload(liveActivity: content) } catch { throw .invalidPayload(error) }
        let shard = shards[APNsClient.workerIndex(for: token, workerCount: shards.count)]
        // Lock-free producers leave the last slots to the control path (publishes, registrations).
        guard shard.commands.approximateCount < shard.commands.capacity - Self.controlReserve else {
            throw .backPressure(shard: shard.index)
        }
        let job = PushJob(token: token, payload: payload, priority: priority, expiration: expiration, collapseID: collapseID)
        let result: PushResult? = await withCheckedContinuation { continuation in
            let single = SinglePush(job: job) { continuation.resume(returning: $0) }
            if shard.commands.enqueue(.push(single)) {
                client.kickProducer(worker: shard.index)
            } else {
                continuation.resume(returning: nil)
            }
            enqueuingPushes.subtract(1, ordering: .acquiringAndReleasing)
            counted = false
        }
        guard let result else { throw .backPressure(shard: shard.index) }
        return result
    }

    /// Queue slots single pushes never take, so a publish finds room on every shard.
    static let controlReserve = 64

    /// Every wave published so far, oldest first.
    public var waves: [Wave] { control.withLock { $0.waves } }

    private func waveCompleted(_ wave: Wave) {
        guard wave.event == .end else { return }
        // The activities of an ended channel go away after their dismissal window: retire its update tokens.
        let at = wave.dismissalDate ?? (configuration.wallClock() + Int64(Self.nanoseconds(configuration.defaultDismissalWindow) / 1_000_000_000))
        control.withLock { $0.pendingRetirements.append((wave.channel, at)) }
    }

    // MARK: - Maintenance

    /// On the registry thread: retires ended channels whose dismissal window passed and activities older than
    /// ActivityKit's lifetime. Also callable directly (tests, operators).
    public func runMaintenance() {
        let now = configuration.wallClock()
        let due = control.withLock { state -> [String] in
            let due = state.pendingRetirements.filter { $0.at <= now }.map(\.channel)
            state.pendingRetirements.removeAll { $0.at <= now }
            return due
        }
        for channel in due {
            do {
                _ = try store.retireUpdateTokens(following: channel)
                control.withLock { _ in
                    for shard in shards { enqueueWaiting(.retireChannel(channel), shard: shard.index) }
                }
            } catch {
                registryWorker.noteError("retiring channel \(channel): \(error)")
            }
        }
        let lifetime = Int64(Self.nanoseconds(configuration.activityLifetime) / 1_000_000)
        do {
            let old = try store.retireUpdateTokens(createdBefore: now * 1000 - lifetime)
            if !old.isEmpty { applyRemoval(old) }
        } catch {
            registryWorker.noteError("retiring old activities: \(error)")
        }
    }

    // MARK: - State

    public var statistics: FanoutStatistics {
        var stats = FanoutStatistics(client: client.statistics)
        stats.invalidationsPersisted = registryWorker.persisted.load(ordering: .relaxed)
        stats.invalidationsKept = registryWorker.keptAfterReRegistration.load(ordering: .relaxed)
        stats.registryErrors = registryWorker.storageErrors.load(ordering: .relaxed)
        stats.lastRegistryError = registryWorker.lastError
        stats.lastConnectionError = client.lastConnectionError
        return stats
    }

    /// Stops the workers; every wave completes (outcomes still open end as failed: Shutdown) and every
    /// invalidation already reported is written to the registry.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        while enqueuingPushes.load(ordering: .acquiring) > 0 { usleep(100) }
        client.shutdown()
        for shard in shards { shard.abandonAfterStop() }
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
}

/// Lets the registry thread reach the engine without keeping it alive.
private final class RetirementBox: @unchecked Sendable {
    weak var engine: FanoutEngine?
}

import FanfareClient
import FanfareCore
import FanfareStorage
import FanfareTLS
import Synchronization

/// Wave ids for several engines that share one wave store (a deployment's apps and environments): each id once,
/// above every id the store saved, so any engine's wave can be named by its id alone.
public final class WaveNumbering: Sendable {
    private let next = Atomic<UInt64>(1)

    public init() {}

    /// Ids continue above `id` (each engine calls this with the store's last id when it opens).
    func advance(past id: UInt64) {
        var current = next.load(ordering: .acquiring)
        while current <= id {
            let (exchanged, original) = next.compareExchange(
                expected: current, desired: id + 1, ordering: .acquiringAndReleasing)
            if exchanged { return }
            current = original
        }
    }

    func take() -> UInt64 { next.add(1, ordering: .acquiringAndReleasing).oldValue }
}

/// One app sending in several environments is an engine per environment on one registry (docs/architecture.md,
/// "Apps"): these calls act on such a group at once, with one durable write for all of it.
extension FanoutEngine {
    /// Removes tokens from every engine's app in one registry transaction (none of another app), then from the
    /// engines' shards. Returns how many were registered.
    @discardableResult
    public static func unregister(_ tokens: [DeviceToken], on engines: [FanoutEngine]) throws(FanoutError) -> Int {
        precondition(!engines.isEmpty, "unregister on no engine")
        try checkGroup(engines)
        let scope: RegistryScope = engines.count == 1 ? engines[0].scope : .bundle(engines[0].configuration.bundleID)
        let removed: Int
        do { removed = try engines[0].store.unregister(tokens, in: scope) } catch { throw .registry(error) }
        for engine in engines { engine.applyRemoval(tokens) }
        return removed
    }

    /// Registers tokens and broadcast subscriptions of one app's environments in one registry transaction: each
    /// goes to the engine of its bundle id and environment (`FanoutError.wrongApp` names the first that has
    /// none, and nothing is written). See `register(_:subscriptions:)`.
    @discardableResult
    public static func register(
        _ registrations: [TokenRegistration], subscriptions: [BroadcastSubscription], on engines: [FanoutEngine]
    ) throws(FanoutError) -> RegistrationResult {
        precondition(!engines.isEmpty, "register on no engine")
        try checkGroup(engines)
        var routed = Array(repeating: [TokenRegistration](), count: engines.count)
        var touched = Set<Int>()
        for (index, registration) in registrations.enumerated() {
            guard let target = engines.engineIndex(registration.bundleID, registration.environment) else {
                throw .wrongApp(index: index, bundleID: registration.bundleID, environment: registration.environment)
            }
            routed[target].append(registration)
            touched.insert(target)
        }
        for (index, subscription) in subscriptions.enumerated() {
            guard let target = engines.engineIndex(subscription.bundleID, subscription.environment) else {
                throw .wrongApp(
                    index: registrations.count + index, bundleID: subscription.bundleID,
                    environment: subscription.environment)
            }
            touched.insert(target)
        }
        // Channel ids are taken (and pinned) before the durable write, so a concurrent registration cannot fill a
        // channel table in between.
        var pinned: [[UInt16]] = []
        for (index, engine) in engines.enumerated() {
            guard let ids = engine.pinChannels(of: routed[index]) else {
                for (earlier, ids) in pinned.enumerated() { engines[earlier].unpin(ids) }
                throw .tooManyChannels(limit: Self.maximumChannels)
            }
            pinned.append(ids)
        }
        let result: RegistrationResult
        do {
            result = try engines[0].store.register(registrations, subscriptions: subscriptions)
        } catch {
            for (index, ids) in pinned.enumerated() { engines[index].unpin(ids) }
            throw .registry(error)
        }
        let replaced = Set(result.replacedTokens)
        for (index, engine) in engines.enumerated() {
            // The registry counts subscription changes per channel, not per environment: a batch that touched one
            // engine gives it the deltas; a batch across environments has each engine count again.
            let deltas = touched.count <= 1 ? (touched.contains(index) ? result.subscriptionDeltas : [:]) : nil
            engine.fill(routed[index], pinned: pinned[index], replaced: replaced, subscriptionDeltas: deltas)
        }
        if !result.replacedTokens.isEmpty {
            for engine in engines { engine.applyRemoval(result.replacedTokens) }
        }
        return result
    }

    /// Publishes `update` on every engine of one app's environments as one publication: a wave each, all saved in
    /// one transaction before any starts (`WaveStore.saveWaves`), in the engines' order; the first wave's id
    /// names the publication. Refused as a whole if any engine refuses it (latest state wins, limits, back
    /// pressure, shut down).
    public static func publish(_ update: ChannelUpdate, on engines: [FanoutEngine]) throws(PublishError) -> [Wave] {
        precondition(!engines.isEmpty, "publish on no engine")
        if engines.count > 1 {
            precondition(
                engines.allSatisfy { $0.waveStore != nil && $0.waveStore === engines[0].waveStore }
                    && engines.allSatisfy { $0.configuration.waveNumbering != nil },
                "a publication's engines share one wave store and one wave numbering")
        }
        var prepared: [PreparedPublish] = []
        for engine in engines { prepared.append(try engine.prepare(update)) }
        let ready = prepared
        return try withControls(of: engines[...]) { states throws(PublishError) -> [Wave] in
            var admitted: [AdmittedWave] = []
            for (index, engine) in engines.enumerated() {
                admitted.append(try engine.admitWave(update, prepared: ready[index], in: &states[index].pointee))
            }
            if let waveStore = engines[0].waveStore {
                // Durable before anything is sent or `publish` returns (one transaction; under the locks so ids,
                // sequences and the store agree).
                do { try waveStore.saveWaves(admitted.map(\.record)) } catch { throw .storage("\(error)") }
            }
            var waves: [Wave] = []
            for (index, engine) in engines.enumerated() {
                waves.append(
                    engine.start(admitted[index], update: update, prepared: ready[index], in: &states[index].pointee))
            }
            return waves
        }
    }

    /// Runs `body` holding every engine's control lock (taken in the given order, as every caller passes one
    /// app's engines in its environments' order), with each engine's state.
    private static func withControls<T: Sendable>(
        of engines: ArraySlice<FanoutEngine>, held: [UnsafeMutablePointer<ControlState>] = [],
        _ body: (inout [UnsafeMutablePointer<ControlState>]) throws(PublishError) -> T
    ) throws(PublishError) -> T {
        guard let first = engines.first else {
            var states = held
            return try body(&states)
        }
        return try first.control.withLock { state throws(PublishError) -> T in
            try withUnsafeMutablePointer(to: &state) { pointer throws(PublishError) -> T in
                try withControls(of: engines.dropFirst(), held: held + [pointer], body)
            }
        }
    }

    /// Engines acting as a group share one registry and one bundle id, each in its own environment.
    private static func checkGroup(_ engines: [FanoutEngine]) throws(FanoutError) {
        for engine in engines where engine.isShutDown.load(ordering: .relaxed) { throw .shutDown }
        guard engines.count > 1 else { return }
        let first = engines[0]
        precondition(
            engines.allSatisfy {
                $0.store === first.store && $0.configuration.bundleID == first.configuration.bundleID
            },
            "engines acting together share one registry and one app")
        precondition(
            Set(engines.map(\.configuration.environment)).count == engines.count, "one engine per environment")
    }

    // MARK: - Inside

    /// Pins the channel ids of `registrations` (nil: they do not fit).
    func pinChannels(of registrations: [TokenRegistration]) -> [UInt16]? {
        guard !registrations.isEmpty else { return [] }
        return control.withLock { state in
            guard state.channels.canAdmit(registrations.lazy.flatMap(\.channels)) else { return nil }
            let sequence = state.nextSequence
            var pinned: [UInt16] = []
            for registration in registrations {
                for name in registration.channels {
                    pinned.append(state.channels.mention(name, sequence: sequence, pin: true))
                }
            }
            return pinned
        }
    }

    /// Releases pins of a registration that was not written.
    func unpin(_ pinned: [UInt16]) {
        guard !pinned.isEmpty else { return }
        control.withLock { state in for id in pinned { state.channels.unpin(id, sequence: 0) } }
    }

    /// Applies durably written registrations to the shards (but those the batch itself replaced), with the
    /// subscription count changes (nil: counted again from the registry).
    func fill(
        _ registrations: [TokenRegistration], pinned: [UInt16], replaced: Set<DeviceToken>,
        subscriptionDeltas: [String: Int]?
    ) {
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
        let recounted = subscriptionDeltas == nil ? try? recountSubscriptions() : nil
        control.withLock { state in
            let sequence = state.nextSequence
            state.nextSequence += 1
            for id in pinned { state.channels.unpin(id, sequence: sequence) }
            if let subscriptionDeltas {
                Self.apply(subscriptionDeltas, to: &state.subscribers)
            } else if let recounted {
                state.subscribers = recounted
            }
            guard !isShutDown.load(ordering: .acquiring) else { return }
            for (index, entries) in perShard.enumerated() where !entries.isEmpty && state.held[index] {
                enqueueWaiting(.register(RegistrationBatch(entries)), shard: index)
            }
        }
    }

    /// This engine's live broadcast subscriptions per channel, from the registry.
    private func recountSubscriptions() throws(RegistryError) -> [String: Int] {
        try store.subscriptionCounts(bundleID: configuration.bundleID, environment: configuration.environment)
    }
}

extension [FanoutEngine] {
    /// The engine that serves `bundleID` in `environment`.
    fileprivate func engineIndex(_ bundleID: String, _ environment: APNsEnvironment) -> Int? {
        firstIndex { $0.configuration.bundleID == bundleID && $0.configuration.environment == environment }
    }
}

extension FanoutEngine {
    /// New APNs connections sign with `source` (a key rotated without a restart); the connections of the key
    /// before drain, their pushes in flight finishing, and nothing is sent twice (`APNsClient.rotateProviderKey`).
    /// If APNs refuses the new key, the previous one takes over again (`providerKeyRefusal`).
    public func rotateProviderKey(to source: ProviderTokenSource) {
        client.rotateProviderKey(to: source)
    }

    /// The key new connections sign with now.
    public var providerKeyID: String? { client.providerKeys.current?.current().keyID }

    /// The last new key APNs refused (and the client set aside for the one before it).
    public var providerKeyRefusal: ProviderKeyRotation.Refusal? { client.providerKeys.lastRefusal }
}

import FanfareClient
import FanfareCore
import FanfareStorage
import Synchronization

/// Where this node is in the shared store's wave feed, and since when it holds each shard.
struct WaveFeedState {
    /// Every wave up to this id has been started on the shards held when it arrived.
    var lastWave: UInt64
    /// Per shard: the feed position when this node took it (nil: not held). Waves after it are new on the shard;
    /// the ones up to it were resumed from their checkpoints when the shard was taken.
    var heldSince: [UInt64?]
    /// How far the registry's change feed has been applied to this node's shards (`registryFeedApplied`); nil
    /// while nobody follows it here (then waves start as soon as they are read).
    var registryApplied: Int64?
}

/// Several engines (nodes) on one shared store (`FanoutConfiguration.leasedShards`, docs/deployment.md).
///
/// The node's coordinator (which holds the leases in the database) calls `takeShard` when it gets a shard's
/// lease, `extendLease` when it renews it, and `dropShard` when it lost it; `catchUpWaves` when the store says
/// a wave was published (and on a timer, since such notices can be lost); `applyRegistered`/`applyRemoved` for
/// registry changes other nodes wrote. A shard this node does not hold has no tokens and sends nothing.
extension FanoutEngine {
    /// Takes shards whose leases this node just got: loads their tokens from the store (one scan), resumes their
    /// part of every unfinished wave from each shard's checkpoint, and lets them send until `sendUntil`
    /// (monotonic ns). Waves published later reach them through `catchUpWaves`. Shards already held only have
    /// their deadline moved. `loadingFrom` reads the tokens (default: the engine's store; a coordinator passes a
    /// connection of its own, so a long load does not hold up the engine's checkpoints).
    public func takeShards(
        _ indices: [Int], sendUntil: UInt64, loadingFrom source: (any TokenStore)? = nil
    ) throws(FanoutError) {
        guard let sharedStore else {
            throw .invalidConfiguration(field: "leasedShards", problem: "this engine does not lease its shards")
        }
        for index in indices where !shards.indices.contains(index) {
            throw .invalidConfiguration(
                field: "shard", problem: "\(index) is not a shard of this engine (0..<\(shards.count))")
        }
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        let taking = try feed.withLock { feed throws(FanoutError) -> [Int] in
            let taking = Array(Set(indices.filter { feed.heldSince[$0] == nil })).sorted()
            for index in indices where feed.heldSince[index] != nil {
                shards[index].sendUntil.store(sendUntil, ordering: .releasing)
            }
            guard !taking.isEmpty else { return [] }
            // Waves published so far are known first, so that "new on the shard" below is exact.
            try catchUp(&feed)
            try load(shards: Set(taking), from: source ?? store)
            let stored: [UnfinishedWave]
            do throws(RegistryError) {
                stored = try sharedStore.unfinishedWaves(
                    bundleID: configuration.bundleID, environment: configuration.environment)
            } catch {
                throw .registry(error)
            }
            let lastWave = feed.lastWave
            control.withLock { state in for index in taking { state.held[index] = true } }
            for index in taking { feed.heldSince[index] = lastWave }
            let unfinished = stored.filter { $0.record.id <= lastWave }
            // Each shard's part is a wave view of its own: the shards came at one moment but may go at others.
            for index in taking { resume(unfinished, onShards: [index]) }
            for index in taking {
                shards[index].sendUntil.store(sendUntil, ordering: .releasing)
                kick(shard: index)
            }
            return taking
        }
        if !taking.isEmpty { configuration.logger.notice("leases: took shards \(taking)") }
    }

    /// `takeShards` for one shard.
    public func takeShard(_ index: Int, sendUntil: UInt64) throws(FanoutError) {
        try takeShards([index], sendUntil: sendUntil)
    }

    /// The lease of a held shard was renewed: it may send until `sendUntil` (monotonic ns).
    public func extendLease(_ index: Int, sendUntil: UInt64) {
        // Not the feed lock: a shard load holds it for seconds, and renewals must not wait for that.
        guard shards.indices.contains(index), control.withLock({ $0.held[index] }) else { return }
        shards[index].sendUntil.store(sendUntil, ordering: .releasing)
        kick(shard: index)
    }

    /// This node lost the shard's lease (another node has it, or it could not renew in time): nothing more of
    /// it goes out from here, at once. Its in-memory state is stale from now on; a node takes a lost shard again
    /// only after a restart (docs/deployment.md, "Losing a lease").
    public func dropShard(_ index: Int) {
        guard shards.indices.contains(index) else { return }
        shards[index].sendUntil.store(0, ordering: .releasing)
        control.withLock { $0.held[index] = false }
        configuration.logger.error("leases: lost shard \(index); this node sends nothing more of it")
    }

    /// Live tokens in the shards this node holds (as of each shard's last loop iteration).
    public var heldShardTokens: Int {
        let held = heldShards
        return held.reduce(0) { $0 + shards[$1].liveTokens.load(ordering: .relaxed) }
    }

    /// Shards this node holds now.
    public var heldShards: [Int] {
        control.withLock { state in state.held.indices.filter { state.held[$0] } }
    }

    /// Starts, in id order, every wave the shared store has after the feed's position, on the shards this node
    /// holds. Safe to call from any thread, as often as wanted (a notice from the database, a timer).
    public func catchUpWaves() throws(FanoutError) {
        guard sharedStore != nil else { return }
        try feed.withLock { feed throws(FanoutError) in try catchUp(&feed) }
    }

    /// Publishes through the shared store (any node may): the store gives the id and refuses an update older
    /// than the channel's newest on any node; then this node starts it on the shards it holds. The other nodes
    /// start it on theirs when their feed reaches it. Returns the wave id; `report(id:)` follows it.
    public func publishShared(_ update: ChannelUpdate) throws(PublishError) -> UInt64 {
        guard let sharedStore else {
            throw .storage("this engine does not share its store (leasedShards is off): use publish(_:)")
        }
        guard !isShutDown.load(ordering: .relaxed) else { throw .shutDown }
        let (payload, _) = try validated(update)
        // Every node starts every wave on its shards: the limit is the cluster's (the store counts), and this
        // node's own count answers first without a round trip.
        let limit = configuration.maximumUnfinishedWaves
        guard unfinishedWaves.load(ordering: .acquiring) < limit else { throw .tooManyUnfinishedWaves(limit: limit) }
        var record = WaveRecord(
            id: 0, bundleID: configuration.bundleID, environment: configuration.environment, channel: update.channel,
            event: update.content.event.rawValue, timestamp: update.content.timestamp,
            priority: update.priority.rawValue,
            hasAlert: update.hasAlert, payload: Array(payload.bytes), freshUntil: update.freshUntil,
            collapseID: update.collapseID, dismissalDate: update.content.dismissalDate,
            publishedAt: Self.wallMilliseconds(), shardCount: shards.count, startKeys: [])
        try planSharedAudience(of: update, into: &record)
        let id: UInt64
        do {
            id = try sharedStore.publishWave(record, unfinishedLimit: limit)
        } catch {
            switch error {
            case .olderThanLatest(let channel, let timestamp, let latest):
                throw .olderThanCurrent(channel: channel, timestamp: timestamp, current: latest)
            case .tooManyUnfinishedWaves(let limit): throw .tooManyUnfinishedWaves(limit: limit)
            case .registry(let error): throw .storage("\(error)")
            }
        }
        do { try catchUpWaves() } catch {
            // Durable already: the feed timer starts it here too. Say so, do not fail the publish.
            configuration.logger.error(
                "shared waves: wave \(id) is published but could not be started here yet: \(error)")
        }
        return id
    }

    /// A wave's report from the shared store: the final one once complete, else the sum of every shard's
    /// checkpoint so far (any node's). nil if the store does not know the wave.
    func sharedReport(id: UInt64) throws(FanoutError) -> WaveReport? {
        guard let sharedStore else { return nil }
        do {
            let app = (configuration.bundleID, configuration.environment)
            if let final = try sharedStore.waveReport(id: id) {
                return (final.bundleID, final.environment) == app ? WaveReport(record: final) : nil
            }
            guard let progress = try sharedStore.waveProgress(id: id),
                (progress.record.bundleID, progress.record.environment) == app
            else { return nil }
            return SharedWaveSummary(
                record: progress.record, checkpoints: progress.checkpoints, logger: configuration.logger
            )
            .runningReport()
        } catch {
            throw .registry(error)
        }
    }

    /// Every unfinished wave of this app in the shared store, newest first, each as the sum of its shards'
    /// checkpoints so far (whichever node holds them). Empty when the store is not shared.
    public func sharedRunningReports() throws(FanoutError) -> [WaveReport] {
        guard sharedStore != nil, let waveStore else { return [] }
        do {
            return try waveStore.unfinishedWaves(
                bundleID: configuration.bundleID, environment: configuration.environment
            )
            .reversed()
            .map {
                SharedWaveSummary(record: $0.record, checkpoints: $0.checkpoints, logger: configuration.logger)
                    .runningReport()
            }
        } catch {
            throw .registry(error)
        }
    }

    /// The registry's change feed is applied to the held shards up to `position` (the coordinator says so at its
    /// start and after every page). From the first call on, a shared wave starts on this node's shards only once
    /// this reaches the wave's `registryPosition`: a registration acknowledged by any node before the publish is
    /// then in the wave, not queued behind its start.
    public func registryFeedApplied(through position: Int64) {
        feed.withLock { feed in feed.registryApplied = max(feed.registryApplied ?? position, position) }
    }

    /// Registrations another node wrote (the registry's change feed): into the shards this node holds.
    public func applyRegistered(_ registrations: [TokenRegistration]) {
        let mine = registrations.filter {
            $0.bundleID == configuration.bundleID && $0.environment == configuration.environment
        }
        guard !mine.isEmpty else { return }
        fill(mine, alsoTo: [])
    }

    /// Removals another node wrote (unregistered, replaced, invalidated, retired): out of the held shards.
    public func applyRemoved(_ tokens: [DeviceToken]) {
        if !tokens.isEmpty { applyRemoval(tokens) }
    }

    // MARK: - Inside

    /// Holding `feed`.
    private func catchUp(_ feed: inout WaveFeedState) throws(FanoutError) {
        guard let sharedStore else { return }
        while true {
            let records: [WaveRecord]
            do {
                records = try sharedStore.waves(
                    after: feed.lastWave, bundleID: configuration.bundleID, environment: configuration.environment,
                    limit: 256)
            } catch {
                throw .registry(error)
            }
            for record in records {
                if let applied = feed.registryApplied, let position = record.registryPosition, position > applied {
                    // Registrations acknowledged before this wave may not be in the shards yet: it starts at the
                    // catch-up after the feed got that far (the coordinator applies the feed, then catches up).
                    return
                }
                // The store admits at most `maximumUnfinishedWaves` (≤ the slot limit) unfinished waves, but a node
                // configured with a larger limit than the others' may have published more: those wait here for
                // completions (the next catch-up) rather than overflow the shards' wave slots.
                guard unfinishedWaves.load(ordering: .acquiring) < FanoutConfiguration.waveSlotLimit else {
                    configuration.logger.warning(
                        "shared waves: every wave slot is in use; wave \(record.id) starts here when some complete")
                    return
                }
                let fresh = feed.heldSince.indices.filter { feed.heldSince[$0] != nil }
                startShared(record, onShards: fresh)
                feed.lastWave = record.id
            }
            if records.count < 256 { return }
        }
    }

    /// Loads some shards' tokens from the store into them (holding `feed`, before they count as held).
    private func load(shards taking: Set<Int>, from source: any TokenStore) throws(FanoutError) {
        var batch: [TokenRegistration] = []
        batch.reserveCapacity(4096)
        do throws(RegistryError) {
            try source.forEachRegistration(
                bundleID: configuration.bundleID, environment: configuration.environment, shards: taking,
                of: shards.count
            ) { registration in
                batch.append(registration)
                if batch.count == 4096 {
                    fill(batch, alsoTo: taking)
                    batch.removeAll(keepingCapacity: true)
                }
            }
        } catch {
            throw .registry(error)
        }
        fill(batch, alsoTo: taking)
    }

    /// Queues registrations (already durable) to the shards this node holds, and to `taking` (being taken).
    /// One whose channels would take the engine past `maximumChannels` channels in use is refused, counted and
    /// logged, and the others go on: a feed page or a shard's load must never stop on it (it stays in the
    /// registry and is loaded when its shard is next taken, once channels were forgotten).
    private func fill(_ registrations: [TokenRegistration], alsoTo taking: Set<Int>) {
        guard !registrations.isEmpty else { return }
        let refused = control.withLock { state -> Int in
            guard !isShutDown.load(ordering: .acquiring) else { return 0 }
            let sequence = state.nextSequence
            state.nextSequence += 1
            var refused = 0
            var perShard = Array(repeating: [RegistrationBatch.Entry](), count: shards.count)
            for registration in registrations {
                let index = APNsClient.workerIndex(for: registration.token, workerCount: shards.count)
                guard state.held[index] || taking.contains(index) else { continue }
                guard state.channels.canAdmit(registration.channels) else {
                    refused += 1
                    continue
                }
                let ids = registration.channels.map { state.channels.mention($0, sequence: sequence) }
                perShard[index].append(Self.entry(registration, channels: ids))
            }
            for (index, entries) in perShard.enumerated() where !entries.isEmpty {
                enqueueWaiting(.register(RegistrationBatch(entries)), shard: index)
            }
            return refused
        }
        guard refused > 0 else { return }
        let total = channelRefusals.add(refused, ordering: .relaxed).newValue
        configuration.logger.error(
            """
            registry: \(refused) registrations not applied here: their channels would exceed \(Self.maximumChannels) \
            channels in use (\(total) so far); they stay in the registry and load when their shard is next taken
            """)
    }

    /// The audience planner for a shared publish: on a channel linked (in the shared store) to an APNs broadcast
    /// channel, an update or end gets a broadcast part, sent once for the cluster by the node holding the
    /// channel's broadcast shard, and a start gets the kick-off body for broadcast-capable tokens.
    private func planSharedAudience(of update: ChannelUpdate, into record: inout WaveRecord) throws(PublishError) {
        let link: LinkedChannel?
        do { link = try linked(update.channel) } catch {
            throw .storage("reading the channel's broadcast link: \(error)")
        }
        guard let link else { return }
        if update.content.event == .start {
            record.channelPayload = try kickOffPayload(for: update, link: link.channelID).payload.map {
                Array($0.bytes)
            }
            return
        }
        record.broadcastChannelID = link.channelID.description
        do {
            record.broadcastSubscribers = try broadcastSubscribers(of: update.channel)
        } catch {
            throw .storage("counting the channel's broadcast subscribers: \(error)")
        }
    }

    /// Records `taking`'s parts of a wave as finished with nothing targeted, and asks for the wave's completion.
    private func finishEmptyParts(of waveID: UInt64, onShards taking: [Int]) {
        guard let checkpointWriter else { return }
        var empty = ShardCheckpoint()
        empty.finished = true
        empty.rangeDone = true
        let savedAt = Self.wallMilliseconds()
        for shard in taking {
            // Generation 0: not a shard's own checkpoint, so it moves no shard's durable generation (permits).
            checkpointWriter.submit(
                shard: shard, generation: 0,
                [WaveCheckpoint(waveID: waveID, shard: shard, data: empty.encoded(), savedAt: savedAt)])
        }
        checkpointWriter.finishShared(waveID)
    }

    /// A wave from the feed: on the shards this node holds, as a new wave (`.publish`); the channel's newest
    /// timestamp moves here in any case. Holding `feed`.
    private func startShared(_ record: WaveRecord, onShards taking: [Int]) {
        let stored: StoredWaveUpdate
        do {
            stored = try StoredWaveUpdate(
                record, wallNow: configuration.wallClock(), wallMilliseconds: Self.wallMilliseconds(),
                monotonicNow: monotonicNow())
        } catch {
            configuration.logger.error("shared waves: wave \(record.id) \(error); this node does not send it")
            return
        }
        let (update, payload, publishedAt, deadline) = (
            stored.update, stored.payload, stored.publishedAt, stored.deadline
        )
        let broadcast = taking.isEmpty ? nil : broadcastPart(of: record)
        control.withLock { state in
            state.latest[record.channel] = max(state.latest[record.channel] ?? record.timestamp, record.timestamp)
            guard !taking.isEmpty, !isShutDown.load(ordering: .acquiring) else { return }
            guard state.channels.canAdmit(CollectionOfOne(record.channel)) else {
                // The channel is not among this node's channels (its registrations were refused here too), so
                // the shards held here have none of its tokens: their parts finish empty, and the wave completes.
                configuration.logger.error(
                    "shared waves: wave \(record.id): more than \(Self.maximumChannels) channels in use here, none of them \(record.channel); this node's parts of it finish empty"
                )
                finishEmptyParts(of: record.id, onShards: taking)
                return
            }
            let sequence = state.nextSequence
            state.nextSequence += 1
            let channel = state.channels.mention(record.channel, sequence: sequence)
            state.channels.setLatestTimestamp(state.latest[record.channel] ?? record.timestamp, of: channel)
            let wave = Wave(
                id: record.id, update: update, shardCount: shards.count, publishedAt: publishedAt, breaker: breaker,
                publishedAtWall: record.publishedAt, broadcast: broadcast, participating: taking,
                onComplete: { [weak self] wave in self?.waveCompleted(wave) })
            let published = PublishedUpdate(
                wave: wave, update: update, channel: channel, sequence: sequence, payload: payload, deadline: deadline,
                channelPayload: stored.channelPayload)
            published.hasAlert = record.hasAlert
            unfinishedWaves.add(1, ordering: .acquiringAndReleasing)
            history.append(wave)
            for index in taking { enqueueWaiting(.publish(published), shard: index) }
        }
    }
}

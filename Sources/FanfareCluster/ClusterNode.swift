import FanfareCore
import FanfareFanout
import FanfareIO
import FanfarePostgres
import FanfareStorage
import Glibc
import Logging
import Synchronization

/// One node of a cluster on PostgreSQL (docs/deployment.md): holds shard leases for its engine and keeps the
/// engine's held shards current.
///
/// Two threads, each with its own database connection, so that a long shard load never delays a renewal:
/// - the lease thread announces the node, waits out the join window, then every `renewInterval` renews the
///   leases it holds and takes expired ones up to its fair share (shards / live nodes, rounded up), and hands
///   shards over when it holds more than its share of the settled nodes (a node joined). A lease
///   that did not renew is dropped from the engine at once (and `onLeaseLost` is called); between renewals,
///   each shard sends only until its lease's end on this node's clock, less the safety margin. Each round also
///   ends the sessions of nodes whose heartbeat is older than a lease (stalled inside a transaction, they would
///   keep locks the others wait on; `fenceStalledNodes`).
/// - the feed thread hands newly leased shards to the engine (`takeShards`), starts published waves
///   (`catchUpWaves`), applies the registry's change feed to the held shards, and drains the shards being
///   handed over (`handOverShards`, after which the lease thread lets their leases go); it wakes on the
///   database's notifications and every `pollInterval` (notifications are lost while a listener is away).
///
/// Every session of the node names its `incarnation` (this run of it), the one its checkpoint store was opened
/// with: the service's store, its registration lanes, the lease and feed stores and the listener.
public final class ClusterNode: @unchecked Sendable {
    public let configuration: ClusterConfiguration
    /// This run of the node, in `cluster_nodes` and in the `application_name` of each of its sessions.
    public let incarnation: NodeIncarnation
    private let engine: FanoutEngine
    private let leaseStore: PostgresTokenStore
    private let feedStore: PostgresTokenStore
    private let listener: PostgresNotificationListener?
    private let logger: Logger
    private let onLeaseLost: @Sendable ([Int]) -> Void

    private struct State {
        var held: [ShardLease] = []
        /// Leased, not yet handed to the engine.
        var toTake: [Int] = []
        /// Monotonic ns until which held shards may send (from the last renewal).
        var sendUntil: UInt64 = 0
        var lost: Set<Int> = []
        /// Rebalancing: shards being drained for another node, drained and waiting for their leases to go, and
        /// every shard this run handed over.
        var handingOver: [Int] = []
        var handedOver: [Int] = []
        var released: Set<Int> = []
        var handovers = 0
        var forcedHandovers = 0
        var takeovers = 0
        /// Take-overs whose load failed (each was tried again at the next round).
        var failedTakes = 0
        var lastRenewal: UInt64 = 0
        var lastError: String?
        var tokenFeed: Int64 = 0
        /// Sessions of stalled nodes this node ended.
        var fencedSessions = 0
        /// Incarnations some of whose sessions this role may not end, logged once each.
        var refusalsLogged: Set<String> = []
        var lastFencingError: String?
    }

    private let state = Mutex(State())
    private let stopping = Atomic<Bool>(false)
    /// Tests: the feed thread neither follows the registry's feed nor catches waves up while set (a feed that
    /// fell behind, on demand).
    let feedPausedForTesting = Atomic<Bool>(false)
    private let leaseWake: UnsafeMutablePointer<sem_t>
    private let feedWake: UnsafeMutablePointer<sem_t>
    private var threads: [pthread_t] = []

    /// Connects (two connections and a listener), checks the engine, and fixes or checks the shard count.
    /// The engine must have been made with `leasedShards` on the same database and `shardCount` shards, and
    /// `checkpointStore` opened with this node's incarnation (`PostgresTokenStore(url:incarnation:)`).
    public init(
        url: String, engine: FanoutEngine, configuration: ClusterConfiguration,
        logger: Logger = Logger(label: "fanfare.cluster"),
        checkpointStore: PostgresTokenStore, onLeaseLost: @escaping @Sendable ([Int]) -> Void = { _ in }
    ) throws(ClusterError) {
        try configuration.validate()
        guard engine.configuration.leasedShards else { throw .engine("the engine must be made with leasedShards on") }
        guard engine.configuration.client.workerCount == configuration.shardCount else {
            throw .engine(
                "the engine has \(engine.configuration.client.workerCount) shards; the cluster \(configuration.shardCount)"
            )
        }
        guard let incarnation = checkpointStore.incarnation else {
            throw .invalidConfiguration(
                "the checkpoint store names no node incarnation: open it with PostgresTokenStore(url:incarnation:), so "
                    + "that a live node can end this node's sessions if it stalls")
        }
        self.incarnation = incarnation
        self.configuration = configuration
        self.engine = engine
        self.logger = logger
        self.onLeaseLost = onLeaseLost
        do {
            // The node's own connections keep the time limit of its main store.
            let timeout = checkpointStore.callTimeout
            leaseStore = try PostgresTokenStore(
                url: url, incarnation: incarnation, callTimeout: timeout, logger: logger)
            feedStore = try PostgresTokenStore(url: url, incarnation: incarnation, callTimeout: timeout, logger: logger)
            try leaseStore.joinCluster(shardCount: configuration.shardCount)
        } catch {
            throw .database("\(error)")
        }
        leaseWake = .allocate(capacity: 1)
        sem_init(leaseWake, 0, 0)
        feedWake = .allocate(capacity: 1)
        sem_init(feedWake, 0, 0)
        nonisolated(unsafe) let wake = feedWake  // a semaphore: posting it from any thread is its purpose
        do {
            listener = try PostgresNotificationListener(
                url: url, channels: [PostgresTokenStore.waveChannel, PostgresTokenStore.tokenChannel],
                incarnation: incarnation, logger: logger
            ) { _ in sem_post(wake) }
        } catch {
            throw .database("\(error)")
        }
        // Checkpoints of this engine are written only under the leases held now.
        fenceTarget = checkpointStore
        checkpointStore.checkpointFence = CheckpointFence(node: configuration.nodeID) { [weak self] refused in
            self?.lost(Array(refused), why: "a checkpoint write was fenced (another node holds a newer epoch)")
        }
    }

    private weak var fenceTarget: PostgresTokenStore?

    deinit {
        stop()
        sem_destroy(leaseWake)
        leaseWake.deallocate()
        sem_destroy(feedWake)
        feedWake.deallocate()
    }

    /// Starts the lease and feed threads.
    public func start() {
        logger.notice(
            "cluster: node \(configuration.nodeID) started as incarnation \(incarnation): its database sessions are named '\(incarnation.sessionName)'"
        )
        do {
            let position = try feedStore.lastTokenChange()
            state.withLock { $0.tokenFeed = position }
        } catch {
            logger.error("cluster: reading the change feed position failed (\(error)); following it from the start")
        }
        // Shards are loaded after this position is read, and the feed is followed from it: waves wait for it.
        engine.registryFeedApplied(through: state.withLock { $0.tokenFeed })
        threads.append(Self.spawn(named: "fanfare-lease") { [self] in leaseLoop() })
        threads.append(Self.spawn(named: "fanfare-feed") { [self] in feedLoop() })
    }

    /// Stops the threads and lets the held leases go at once, so other nodes take the shards without waiting
    /// for them to expire. Call after the engine's graceful shutdown (its last checkpoints are then written).
    public func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        sem_post(leaseWake)
        sem_post(feedWake)
        for thread in threads { PlainThread.join(thread) }
        threads = []
        listener?.stop()
        let held = state.withLock { $0.held }
        do {
            try leaseStore.releaseLeases(node: configuration.nodeID, held)
            if !held.isEmpty { logger.notice("cluster: released \(held.count) shard leases") }
        } catch {
            logger.error(
                "cluster: releasing the leases failed (\(error)); they expire in \(configuration.leaseDuration)")
        }
    }

    /// `stop()` from an async caller: the threads are joined and the leases released on a thread of its own.
    public func stop() async {
        await BlockingHandOff.run(name: "cluster-stop") { self.stop() }
    }

    /// Tests: what kill -9 leaves. The threads stop and the leases stay until they expire.
    func abandonForTesting() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        sem_post(leaseWake)
        sem_post(feedWake)
        for thread in threads { PlainThread.join(thread) }
        threads = []
        listener?.stop()
    }

    /// What this node holds and has done (operators, tests, metrics).
    public struct Status: Sendable {
        public var node: String
        /// Shards leased and served: their tokens loaded, their waves resumed, their pushes going out.
        public var heldShards: [Int]
        /// Shards leased but not served yet: being loaded, or their load failed and is retried (`lastError`).
        public var takingShards: [Int]
        /// Loads of leased shards that failed and were tried again.
        public var failedTakes: Int
        public var lostShards: [Int]
        /// Shards this run handed to other nodes (rebalancing), and how many of them did not drain in time.
        public var handedOverShards: [Int]
        public var forcedHandovers: Int
        public var takeovers: Int
        /// Sessions of stalled nodes this node ended (`fenceStalledNodes`).
        public var fencedSessions: Int
        public var lastError: String?
    }

    public var status: Status {
        state.withLock { state in
            Status(
                node: configuration.nodeID, heldShards: state.held.map(\.shard).filter { !state.toTake.contains($0) },
                takingShards: state.toTake.sorted(), failedTakes: state.failedTakes, lostShards: state.lost.sorted(),
                handedOverShards: state.released.sorted(), forcedHandovers: state.forcedHandovers,
                takeovers: state.takeovers, fencedSessions: state.fencedSessions, lastError: state.lastError)
        }
    }

    // MARK: - Leases

    private func leaseLoop() {
        let joinWindow = Self.nanoseconds(configuration.joinWindow ?? configuration.leaseDuration)
        var joinUntil = Self.now() &+ joinWindow
        while !stopping.load(ordering: .acquiring) {
            let started = Self.now()
            do {
                let (position, accepting) = state.withLock { ($0.tokenFeed, $0.lost.isEmpty) }
                let membership = try leaseStore.heartbeat(
                    node: configuration.nodeID, incarnation: incarnation, window: configuration.leaseDuration,
                    feedPosition: position, accepting: accepting)
                if let gap = membership.sincePrevious, gap > configuration.leaseDuration {
                    // Every node may have been away with it (the database out of reach or stalled): their
                    // heartbeats are as old as this one's, so they look dead. Join again, as at a start: renew
                    // what is held, and take nothing until the others had a window to come back and renew theirs.
                    joinUntil = Self.now() &+ joinWindow
                    logger.notice(
                        "cluster: no heartbeat of this node for \(gap) (the database was out of reach?): renewing what it holds and taking nothing for \(configuration.joinWindow ?? configuration.leaseDuration)"
                    )
                }
                try releaseHandedOver()
                try renew(started: started)
                if Self.now() >= joinUntil {
                    // Before taking leases: a stalled node may hold its lease rows locked (a checkpoint's fence).
                    // Not while joining: another node's old heartbeat may be the database's stall, not the node's.
                    fenceStalledNodes()
                    try takeShare(live: membership.live, started: started)
                    rebalance(settled: membership.settled)
                }
                state.withLock { $0.lastError = nil }
            } catch {
                let message = "\(error)"
                let first = state.withLock { state in
                    defer { state.lastError = message }
                    return state.lastError != message
                }
                // The shards stop on their own at their deadlines; a later renewal that works lets them go on.
                if first { logger.error("cluster: the lease round failed (\(message)); retrying") }
            }
            wait(leaseWake, Self.nanoseconds(configuration.renewInterval))
        }
    }

    private func renew(started: UInt64) throws(RegistryError) {
        let held = state.withLock { $0.held }
        guard !held.isEmpty else { return }
        let kept = try leaseStore.renewLeases(node: configuration.nodeID, held, duration: configuration.leaseDuration)
        let until = deadline(from: started)
        let gone = Set(held.map(\.shard)).subtracting(kept.map(\.shard))
        let toTake = state.withLock { state -> Set<Int> in
            state.held = kept
            state.sendUntil = until
            state.lastRenewal = started
            return Set(state.toTake)
        }
        fenceTarget?.checkpointFence?.hold(kept)
        for lease in kept where !toTake.contains(lease.shard) { engine.extendLease(lease.shard, sendUntil: until) }
        if !gone.isEmpty { lost(Array(gone), why: "its lease was not renewed in time and another node took it") }
    }

    private func takeShare(live: Int, started: UInt64) throws(RegistryError) {
        let (heldCount, lostCount) = state.withLock { state in
            (state.held.count - state.handingOver.count - state.handedOver.count, state.lost.count)
        }
        // A node that lost a shard holds stale state for it; it takes nothing more until restarted.
        guard lostCount == 0 else { return }
        let share = Self.share(of: configuration.shardCount, among: live)
        guard heldCount < share else { return }
        let taken = try leaseStore.acquireLeases(
            node: configuration.nodeID, limit: share - heldCount, duration: configuration.leaseDuration,
            excluding: engine.staleShards)
        guard !taken.isEmpty else { return }
        let until = deadline(from: started)
        let all = state.withLock { state -> [ShardLease] in
            state.held += taken
            state.held.sort { $0.shard < $1.shard }
            state.toTake += taken.map(\.shard)
            state.sendUntil = until
            state.takeovers += taken.count
            return state.held
        }
        fenceTarget?.checkpointFence?.hold(all)
        logger.notice("cluster: leased shards \(taken.map(\.shard)) (epochs \(taken.map(\.epoch))), \(live) nodes live")
        sem_post(feedWake)
    }

    /// The node whose lease on `shard` is current in the database, or nil (none, or it expired). Reads the
    /// lease table (blocking: call off the event loops).
    public func holder(ofShard shard: Int) throws -> String? {
        try leaseStore.leaseTable().first { $0.shard == shard && !$0.expired }?.node
    }

    /// Shards per node, rounded up.
    static func share(of shards: Int, among nodes: Int) -> Int { (shards + max(1, nodes) - 1) / max(1, nodes) }

    /// Rebalancing: holding more than the fair share among the settled nodes (a node joined and waited out its
    /// join window), the excess goes to the feed thread to be handed over; the joining node takes the leases
    /// once they are let go. Nothing while a take-over or a hand-over is under way.
    private func rebalance(settled: Int) {
        let share = Self.share(of: configuration.shardCount, among: settled)
        let chosen = state.withLock { state -> [Int] in
            guard state.toTake.isEmpty, state.handingOver.isEmpty, state.handedOver.isEmpty, state.lost.isEmpty
            else { return [] }
            let excess = state.held.count - share
            guard excess > 0 else { return [] }
            let chosen = Array(state.held.map(\.shard).sorted().suffix(excess))
            state.handingOver = chosen
            return chosen
        }
        guard !chosen.isEmpty else { return }
        logger.notice(
            "cluster: holding \(chosen.count) shards over the fair share of \(share) (\(settled) settled nodes): handing \(chosen) over"
        )
        sem_post(feedWake)
    }

    /// Lets the leases of drained shards go, so the joining node takes them at its next round.
    private func releaseHandedOver() throws(RegistryError) {
        let leases = state.withLock { state in state.held.filter { state.handedOver.contains($0.shard) } }
        guard !leases.isEmpty else { return }
        try leaseStore.releaseLeases(node: configuration.nodeID, leases, leaving: false)
        let held = state.withLock { state -> [ShardLease] in
            state.held.removeAll { state.handedOver.contains($0.shard) }
            state.handedOver = []
            return state.held
        }
        fenceTarget?.checkpointFence?.hold(held)
        logger.notice("cluster: let the leases of shards \(leases.map(\.shard)) go")
    }

    /// Ends the sessions of every other node whose heartbeat is older than a lease: its leases expired with it,
    /// so it is fenced from its shards already, and a node stopped inside a transaction keeps row and advisory
    /// locks that the others' checkpoints, completions and API calls wait on. When it resumes, its sessions are
    /// gone: it reconnects, finds its leases lost and exits. A failure here is logged and fails no renewal.
    private func fenceStalledNodes() {
        do {
            let fenced = try leaseStore.fenceStalledNodes(
                sparing: incarnation, silentLongerThan: configuration.leaseDuration)
            state.withLock { $0.lastFencingError = nil }
            for stalled in fenced {
                let firstRefusal = state.withLock { state -> Bool in
                    state.fencedSessions += stalled.sessionsEnded
                    return stalled.sessionsRefused > 0 && state.refusalsLogged.insert(stalled.incarnation).inserted
                }
                if stalled.sessionsEnded > 0 {
                    logger.warning(
                        "cluster: fenced node \(stalled.node) (incarnation \(stalled.incarnation)): no heartbeat for over \(configuration.leaseDuration); ended its \(stalled.sessionsEnded) database sessions, so the locks they held go"
                    )
                }
                if firstRefusal {
                    logger.error(
                        "cluster: cannot end \(stalled.sessionsRefused) database sessions of stalled node \(stalled.node) (incarnation \(stalled.incarnation)): this database role may not signal them; run every node as the same role"
                    )
                }
            }
        } catch {
            let message = "\(error)"
            let first = state.withLock { state in
                defer { state.lastFencingError = message }
                return state.lastFencingError != message
            }
            if first { logger.error("cluster: ending the sessions of stalled nodes failed (\(message)); retrying") }
        }
    }

    /// The shards stop sending, at once, and are reported.
    private func lost(_ shards: [Int], why: String) {
        let fresh = state.withLock { state -> [Int] in
            let fresh = shards.filter { !state.lost.contains($0) }
            state.lost.formUnion(fresh)
            state.held.removeAll { fresh.contains($0.shard) }
            state.toTake.removeAll { fresh.contains($0) }
            return fresh
        }
        guard !fresh.isEmpty else { return }
        for shard in fresh { engine.dropShard(shard) }
        logger.error("cluster: lost shards \(fresh.sorted()): \(why); nothing more of them is sent from this node")
        onLeaseLost(fresh.sorted())
    }

    private func deadline(from started: UInt64) -> UInt64 {
        started &+ Self.nanoseconds(configuration.leaseDuration) &- Self.nanoseconds(configuration.margin)
    }

    // MARK: - Feeds

    private func feedLoop() {
        var lastPrune: UInt64 = 0
        while !stopping.load(ordering: .acquiring) {
            do {
                let (toTake, until, handingOver) = state.withLock { ($0.toTake, $0.sendUntil, $0.handingOver) }
                if !toTake.isEmpty { try take(toTake, sendUntil: until) }
                if !handingOver.isEmpty { handOver(handingOver) }
                // The feed first: a wave starts here once the registrations acknowledged before it are applied.
                if !feedPausedForTesting.load(ordering: .acquiring) {
                    try followTokenChanges()
                    try engine.catchUpWaves()
                }
                if Self.now() &- lastPrune > 60_000_000_000 {
                    lastPrune = Self.now()
                    try feedStore.pruneTokenChanges(
                        olderThan: configuration.changeRetention, liveWithin: configuration.leaseDuration)
                }
            } catch {
                let message = "\(error)"
                let first = state.withLock { state in
                    defer { state.lastError = message }
                    return state.lastError != message
                }
                if first { logger.error("cluster: following the feeds failed (\(message)); retrying") }
            }
            wait(feedWake, Self.nanoseconds(configuration.pollInterval))
        }
    }

    /// Hands leased shards to the engine. They stay on the take list until that worked: a load that failed (the
    /// database, a bad row) is tried again at the next round, and meanwhile the shards are not reported served.
    private func take(_ toTake: [Int], sendUntil until: UInt64) throws(FanoutError) {
        do {
            try engine.takeShards(toTake, sendUntil: until, loadingFrom: feedStore)
        } catch {
            state.withLock { $0.failedTakes += 1 }
            throw error
        }
        let (latest, lostMeanwhile) = state.withLock { state -> (UInt64, [Int]) in
            state.toTake.removeAll { toTake.contains($0) }
            return (state.sendUntil, toTake.filter { state.lost.contains($0) })
        }
        // A renewal may have come while loading; a shard lost meanwhile was dropped before the engine held it.
        for shard in toTake where !lostMeanwhile.contains(shard) { engine.extendLease(shard, sendUntil: latest) }
        for shard in lostMeanwhile { engine.dropShard(shard) }
        logger.notice("cluster: serving shards \(toTake)")
    }

    /// Drains shards for another node (`FanoutEngine.handOverShards`); the lease thread then lets them go.
    private func handOver(_ shards: [Int]) {
        let handover = engine.handOverShards(shards, timeout: configuration.handoverTimeout)
        state.withLock { state in
            state.handingOver.removeAll { shards.contains($0) }
            state.handedOver += shards
            state.released.formUnion(shards)
            state.handovers += handover.clean.count
            state.forcedHandovers += handover.forced.count
        }
        sem_post(leaseWake)
    }

    private func followTokenChanges() throws {
        var position = state.withLock { $0.tokenFeed }
        while true {
            // Only the held shards' changes: the others are other nodes' to read.
            let page = try feedStore.tokenChanges(
                after: position, bundleID: engine.configuration.bundleID, environment: engine.configuration.environment,
                limit: 10_000, shards: Set(engine.heldShards), of: configuration.shardCount)
            if !page.removed.isEmpty { engine.applyRemoved(page.removed) }
            // Never throws: a registration that cannot be applied here is counted and skipped, so one bad page
            // does not stop this node from following every later change.
            if !page.registered.isEmpty { engine.applyRegistered(page.registered) }
            position = page.last
            state.withLock { $0.tokenFeed = position }
            engine.registryFeedApplied(through: position)
            if page.isComplete { return }
        }
    }

    // MARK: - Threads and time

    private func wait(_ semaphore: UnsafeMutablePointer<sem_t>, _ nanoseconds: UInt64) {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        let total = UInt64(spec.tv_nsec) + nanoseconds
        spec.tv_sec += Int(total / 1_000_000_000)
        spec.tv_nsec = Int(total % 1_000_000_000)
        _ = sem_timedwait(semaphore, &spec)
    }

    static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) &* 1_000_000_000 &+ UInt64(spec.tv_nsec)
    }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    private static func spawn(named name: String, _ body: @escaping @Sendable () -> Void) -> pthread_t {
        do {
            return try PlainThread.start(named: name, body)
        } catch {
            preconditionFailure("could not start a cluster thread: \(error)")
        }
    }
}

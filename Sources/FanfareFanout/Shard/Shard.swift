import FanfareClient
import FanfareCore
import FanfareIO
import FanfareStorage
import Synchronization
import Glibc

/// One worker's share of the tokens, and the fan-out state that goes with them.
///
/// A token belongs to the shard `APNsClient.workerIndex(for:)` names, and the shard is that worker's
/// `PushProducer`: it runs on the worker's thread, hands pushes out as streams free up, and gets their
/// results on the same thread. So the token tables, budgets, cursors and counters below take no lock.
/// Other threads reach a shard only through its `inbox`.
final class Shard: PushProducer, SendingLease, @unchecked Sendable {
    let index: Int
    let inbox: ShardInbox
    /// Answers held for the invalid-token breaker (for statistics; written by the shard's thread).
    let heldCount = Atomic<Int>(0)
    /// Registrations the shard had no room for (its 4 GiB token arena is full); they stay in the registry.
    let registrationsRefused = Atomic<Int>(0)
    let settings: ShardSettings
    let standardBudget: PriorityBudget
    let frequentBudget: PriorityBudget
    unowned(unsafe) let invalidations: InvalidationSink
    let breaker: InvalidTokenBreaker

    // Tokens and channels (thread-confined after start). Channels are the engine's ids (`ChannelDirectory`).
    @exclusivity(unchecked) var tokens = TokenTable()
    @exclusivity(unchecked) var tokenIndex = TokenSlotIndex()
    @exclusivity(unchecked) var channelSets = ChannelSets()
    /// Two audiences per channel: `[2 * channel + kind]`.
    @exclusivity(unchecked) var audiences: [Audience] = []

    // Waves.
    @exclusivity(unchecked) var waves: [ShardWave?] = []
    /// Keeps each running wave's update (and through it the wave and its tallies) alive; see `ShardWave`.
    @exclusivity(unchecked) var waveOwners: [PublishedUpdate?] = []
    @exclusivity(unchecked) var freeWaves: [Int] = []
    /// Audiences with a running cursor, visited round-robin one push at a time.
    @exclusivity(unchecked) var activeAudiences: [Int] = []
    @exclusivity(unchecked) var nextActive = 0

    // Broadcasts (channels linked to an APNs broadcast channel) this shard sends, by engine channel id.
    @exclusivity(unchecked) var broadcastLanes = BroadcastLanes()

    // Members waiting: lane 0 is "ready now", lane 1 the minimum interval, lanes 2... retry back-offs.
    @exclusivity(unchecked) var lanes: [DueLane]
    static let readyLane = 0
    static let intervalLane = 1
    static let firstRetryLane = 2

    /// Pushes handed out and results taken back, since the start.
    @exclusivity(unchecked) var pushesOut: UInt64 = 0
    @exclusivity(unchecked) var resultsBack: UInt64 = 0
    /// The invalid-token breaker's window of results and the bad-token answers it holds (`BreakerWindow`).
    @exclusivity(unchecked) var window = BreakerWindow()
    /// Waves do not advance while the breaker is open (single pushes still go).
    @exclusivity(unchecked) var paused = false

    // Durable waves (docs/fanout.md): checkpoints go to `checkpoints`, which says which generation is durable.
    /// nil: no wave store, or checkpoints turned off (nothing limits a cursor).
    var checkpoints: CheckpointWriter?
    var checkpointWindow = Int.max
    var checkpointInterval: UInt64 = 100_000_000
    var checkpointPushes: UInt64 = 10_000
    @exclusivity(unchecked) var checkpointDue = false
    @exclusivity(unchecked) var nextCheckpointAt: UInt64 = 0
    @exclusivity(unchecked) var pushesAtCheckpoint: UInt64 = 0
    @exclusivity(unchecked) var checkpointGeneration: UInt64 = 0
    @exclusivity(unchecked) var durableSeen: UInt64 = 0
    @exclusivity(unchecked) var stalledAudiences: [Int] = []
    @exclusivity(unchecked) var walkSorter = WalkSorter()
    /// A graceful shutdown asked the shard to send no more wave pushes (single pushes still go).
    let stopWavesRequested = Atomic<Bool>(false)
    /// Monotonic ns until which wave pushes may go out: `.max` for a lone engine; with leased shards, the end of
    /// this node's lease (0: not held). Read once per poll.
    let sendUntil = Atomic<UInt64>(.max)
    /// `SendingLease`: the worker's transports check it before each send they submit.
    var sendsUntil: UInt64 { sendUntil.load(ordering: .relaxed) }
    /// Live tokens in this shard, as of its last loop iteration (for other threads: statistics, readiness).
    let liveTokens = Atomic<Int>(0)
    @exclusivity(unchecked) var stoppingWaves = false
    /// Pushes handed out and not answered yet, published once per loop iteration while stopping.
    let inFlight = Atomic<Int>(0)
    /// Posted when `inFlight` reaches 0 while stopping: the engine's graceful shutdown waits on it.
    let drained = ThreadSignal()
    /// Rebalancing (Shard+Release.swift): the hand-over asked for, and where it is.
    @exclusivity(unchecked) var releaseRequest: ShardRelease?
    @exclusivity(unchecked) var releaseCheckpointTaken = false
    @exclusivity(unchecked) var releaseGeneration: UInt64 = 0
    /// A hand-over that did not drain in time: the shard's tables are stale until the node restarts (it is not
    /// taken again), and it writes no more checkpoints.
    let stale = Atomic<Bool>(false)

    /// Debug check of the confinement above: loaded on one thread, driven by its worker's, finished after
    /// the worker was joined.
    @exclusivity(unchecked) var ownership = ThreadOwnership()

    /// Monotonic origin of the shard clock (deciseconds, offset so 0 means "never").
    let clockOrigin: UInt64

    /// `clockOrigin`: monotonic ns the shard clock counts from (a schedule test passes its own clock's start).
    init(
        index: Int, settings: ShardSettings, commandCapacity: Int, invalidations: InvalidationSink,
        breaker: InvalidTokenBreaker, clockOrigin: UInt64 = monotonicNow()
    ) {
        self.index = index
        self.settings = settings
        standardBudget = PriorityBudget(settings.standardBudget)
        frequentBudget = PriorityBudget(settings.frequentBudget)
        inbox = ShardInbox(commandCapacity: commandCapacity)
        self.invalidations = invalidations
        self.breaker = breaker
        lanes =
            [DueLane(delay: 0), DueLane(delay: settings.minimumInterval)]
            + settings.retryDelays.map { DueLane(delay: $0) }
        self.clockOrigin = clockOrigin
        startWindow()
    }

    deinit {
        walkSorter.deallocate()
        tokens.deallocate()
        for index in audiences.indices { audiences[index].deallocate() }
    }

    var maxRetries: Int { settings.retryDelays.count }

    /// Deciseconds on the shard clock; starts at 1,000,000 so "never" (0) is always long ago.
    @inline(__always)
    func tenths(_ now: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: (now &- clockOrigin) / 100_000_000 &+ 1_000_000)
    }

    // MARK: - Commands

    func service(now: UInt64) {
        ownership.claim("Shard")  // the worker's first call: from now on only its thread
        service(now: now, commandLimit: settings.commandsPerTick, workUntil: now &+ settings.controlWorkPerTick)
    }

    /// Takes the queued single pushes, then control commands up to `commandLimit` or until `workUntil` (monotonic
    /// ns; `.max` after the worker stopped: everything queued is taken).
    func service(now: UInt64, commandLimit: Int, workUntil: UInt64) {
        // Single pushes first, all of them: taking one is an append, and poll sends them before any wave member.
        while let single = inbox.takeSingle() { readySingles.append(single) }
        // Then control work, within a count and a time budget per loop iteration (always at least one command): a
        // wave's start sorts its audience, and a flood of publishes must not keep this thread from its streams.
        // What is left waits here, and publishers meet back-pressure once the queue is full.
        var budget = commandLimit
        while budget > 0, let command = inbox.takeControl() {
            budget -= 1
            switch command {
            case .publish(let update): start(update)
            case .register(let batch): for entry in batch.entries { register(entry) }
            case .unregister(let batch): for token in batch.tokens { unregister(token) }
            case .retireChannel(let channel): retireChannel(Int(channel))
            case .sweepChannels(let sweep): sweepChannels(sweep)
            case .countAudience(let census): countAudience(census)
            case .resumeAfterBreaker(let prune): resumeAfterBreaker(pruneHeldTokens: prune, now: now)
            case .resumeWave(let resumed): resume(resumed.update, checkpoint: resumed.checkpoint, mode: resumed.mode)
            case .release(let request): beginRelease(request)
            }
            if workUntil != .max && monotonicNow() >= workUntil { break }
        }
        liveTokens.store(tokens.aliveCount, ordering: .relaxed)
        // Once per loop iteration, not per push: another shard may have opened the breaker.
        if breaker.generation.load(ordering: .relaxed) & 1 == 1 { paused = true }
        judgeWindowIfIdle(now: now)
        if let checkpoints {
            let durable = checkpoints.durableGeneration(shard: index)
            if durable != durableSeen {
                durableSeen = durable
                applyPermits(durable: durable)
            }
            if checkpointDue || now >= nextCheckpointAt || pushesOut &- pushesAtCheckpoint >= checkpointPushes {
                takeCheckpoint(now: now)
            }
        }
        continueRelease(now: now)
        if stopWavesRequested.load(ordering: .relaxed) {
            stoppingWaves = true
            let out = Int(pushesOut &- resultsBack)
            if inFlight.exchange(out, ordering: .releasing) != 0 && out == 0 { drained.post() }
        }
    }

    /// Single pushes queued by `service`, sent before wave members (FIFO; the array is reset when drained).
    @exclusivity(unchecked) var readySingles: [SinglePush] = []
    @exclusivity(unchecked) var nextReadySingle = 0
    /// Single pushes in flight, by the slot in their cookie.
    @exclusivity(unchecked) var singlesInFlight: [SinglePush?] = []
    @exclusivity(unchecked) var freeSingleSlots: [Int] = []

    // MARK: - Inspection (tests, statistics; shard thread or stopped)

    var memoryBytes: Int {
        tokens.bytesUsed + tokenIndex.bytesUsed + audiences.reduce(0) { $0 + $1.bytesUsed }
    }
}

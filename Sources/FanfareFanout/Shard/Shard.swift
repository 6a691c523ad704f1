import FanfareClient
import FanfareCore
import FanfareIO
import FanfareRegistry
import Synchronization
import Glibc

/// One worker's share of the tokens, and the fan-out state that goes with them.
///
/// A token belongs to the shard `APNsClient.workerIndex(for:)` names, and the shard is that worker's
/// `PushProducer`: it runs on the worker's thread, hands pushes out as streams free up, and gets their
/// results on the same thread. So the token tables, budgets, cursors and counters below take no lock.
/// Other threads reach a shard only through its two bounded lock-free MPSC queues: `control` and `singles`.
final class Shard: PushProducer, SendingLease, @unchecked Sendable {
    let index: Int
    /// Publishes, registrations and the rest, in the order the engine queued them (under its control lock).
    let control: BoundedMPSCQueue<ShardCommand>
    /// Single pushes, on a queue of their own: taken every loop iteration before any control work, so a flood of
    /// publishes never stands between a single push and its stream.
    let singles: BoundedMPSCQueue<SinglePush>
    /// Control commands queued and not yet taken. Queued under the engine's control lock and never past
    /// `controlCapacity`, so room a publish checked on every shard is still there when it enqueues.
    let controlQueued = Atomic<Int>(0)
    var controlCapacity: Int { control.capacity }
    /// Answers held for the invalid-token breaker (for statistics; written by the shard's thread).
    let heldCount = Atomic<Int>(0)
    /// Registrations the shard had no room for (its 4 GiB token arena is full); they stay in the registry.
    let registrationsRefused = Atomic<Int>(0)
    private let settings: ShardSettings
    private let standardBudget: PriorityBudget
    private let frequentBudget: PriorityBudget
    private unowned(unsafe) let invalidations: InvalidationSink
    private let breaker: InvalidTokenBreaker

    // Tokens and channels (thread-confined after start). Channels are the engine's ids (`ChannelDirectory`).
    @exclusivity(unchecked) private(set) var tokens = TokenTable()
    @exclusivity(unchecked) private var tokenIndex = TokenSlotIndex()
    @exclusivity(unchecked) private(set) var channelSets = ChannelSets()
    /// Two audiences per channel: `[2 * channel + kind]`.
    @exclusivity(unchecked) private(set) var audiences: [Audience] = []

    // Waves.
    @exclusivity(unchecked) private var waves: [ShardWave?] = []
    /// Keeps each running wave's update (and through it the wave and its tallies) alive; see `ShardWave`.
    @exclusivity(unchecked) private var waveOwners: [PublishedUpdate?] = []
    @exclusivity(unchecked) private var freeWaves: [Int] = []
    /// Increments at every wave start (see `TokenTable.registeredOrDiedAt`).
    @exclusivity(unchecked) private var epoch: UInt32 = 1
    /// Audiences with a running cursor, visited round-robin one push at a time.
    @exclusivity(unchecked) private var activeAudiences: [Int] = []
    @exclusivity(unchecked) private var nextActive = 0

    // Broadcasts (channels linked to an APNs broadcast channel) this shard sends, by engine channel id.
    @exclusivity(unchecked) private var broadcastLanes: [UInt16: BroadcastLane] = [:]
    /// Lanes with a broadcast waiting to go (poll looks at the lanes only then).
    @exclusivity(unchecked) private var broadcastsWaiting = 0

    // Members waiting: lane 0 is "ready now", lane 1 the minimum interval, lanes 2... retry back-offs.
    @exclusivity(unchecked) private var lanes: [DueLane]
    private static let readyLane = 0
    private static let intervalLane = 1
    private static let firstRetryLane = 2

    // The invalid-token breaker (see `InvalidTokenBreakerConfiguration`): results are judged in windows; a
    // BadDeviceToken / DeviceTokenNotForTopic answer waits in `heldMembers` / `heldSingles` until its window
    // is judged normal (then its token is pruned) or the breaker opens (then nothing is pruned).
    /// Waves do not advance while the breaker is open (single pushes still go).
    @exclusivity(unchecked) private(set) var paused = false
    /// Pushes handed out and results taken back, since the start.
    @exclusivity(unchecked) private var pushesOut: UInt64 = 0
    @exclusivity(unchecked) private var resultsBack: UInt64 = 0
    /// The current window: results from `windowStart` up to `windowEnd`.
    @exclusivity(unchecked) private var windowStart: UInt64 = 0
    @exclusivity(unchecked) private var windowEnd: UInt64 = 0
    @exclusivity(unchecked) private var windowBadDeviceToken = 0
    @exclusivity(unchecked) private var windowNotForTopic = 0
    @exclusivity(unchecked) private var heldMembers: [HeldMember] = []
    @exclusivity(unchecked) private var heldSingles: [HeldSingle] = []
    @exclusivity(unchecked) private var heldTotal = 0

    private struct HeldMember {
        var ref: MemberRef
        var wave: Int
        var reason: APNsReason
        var timestamp: Int64?
    }

    private struct HeldSingle {
        var token: DeviceToken
        var reason: APNsReason
        var timestamp: Int64?
    }

    // Durable waves (docs/fanout.md): checkpoints go to `checkpoints`, which says which generation is durable.
    /// nil: no wave store, or checkpoints turned off (nothing limits a cursor).
    var checkpoints: CheckpointWriter?
    var checkpointWindow = Int.max
    private var checkpointInterval: UInt64 = 100_000_000
    private var checkpointPushes: UInt64 = 10_000
    @exclusivity(unchecked) private var checkpointDue = false
    @exclusivity(unchecked) private var nextCheckpointAt: UInt64 = 0
    @exclusivity(unchecked) private var pushesAtCheckpoint: UInt64 = 0
    @exclusivity(unchecked) private var checkpointGeneration: UInt64 = 0
    @exclusivity(unchecked) private var durableSeen: UInt64 = 0
    @exclusivity(unchecked) private var stalledAudiences: [Int] = []
    @exclusivity(unchecked) private var walkSorter = WalkSorter()
    /// A graceful shutdown asked the shard to send no more wave pushes (single pushes still go).
    let stopWavesRequested = Atomic<Bool>(false)
    /// Monotonic ns until which wave pushes may go out: `.max` for a lone engine; with leased shards, the end of
    /// this node's lease (0: not held). Read once per poll.
    let sendUntil = Atomic<UInt64>(.max)
    /// `SendingLease`: the worker's transports check it before each send they submit.
    var sendsUntil: UInt64 { sendUntil.load(ordering: .relaxed) }
    /// Live tokens in this shard, as of its last loop iteration (for other threads: statistics, readiness).
    let liveTokens = Atomic<Int>(0)
    @exclusivity(unchecked) private var stoppingWaves = false
    /// Pushes handed out and not answered yet, published once per loop iteration while stopping.
    let inFlight = Atomic<Int>(0)

    /// Monotonic origin of the shard clock (deciseconds, offset so 0 means "never").
    private let clockOrigin: UInt64

    init(
        index: Int, settings: ShardSettings, commandCapacity: Int, invalidations: InvalidationSink,
        breaker: InvalidTokenBreaker
    ) {
        self.index = index
        self.settings = settings
        standardBudget = PriorityBudget(settings.standardBudget)
        frequentBudget = PriorityBudget(settings.frequentBudget)
        control = BoundedMPSCQueue(capacity: max(2, commandCapacity / 2))
        singles = BoundedMPSCQueue(capacity: max(2, commandCapacity / 2))
        self.invalidations = invalidations
        self.breaker = breaker
        lanes = [DueLane(delay: 0), DueLane(delay: settings.minimumInterval)]
            + settings.retryDelays.map { DueLane(delay: $0) }
        clockOrigin = monotonicNow()
        startWindow()
    }

    deinit {
        walkSorter.deallocate()
        tokens.deallocate()
        for index in audiences.indices { audiences[index].deallocate() }
    }

    private var maxRetries: Int { settings.retryDelays.count }

    /// Deciseconds on the shard clock; starts at 1,000,000 so "never" (0) is always long ago.
    @inline(__always)
    private func tenths(_ now: UInt64) -> UInt32 {
        UInt32(truncatingIfNeeded: (now &- clockOrigin) / 100_000_000 &+ 1_000_000)
    }

    // MARK: - Loading and registration

    /// Before the worker starts (one thread), or on the shard thread: adds or replaces one token.
    func register(_ entry: RegistrationBatch.Entry) {
        let set = channelSets.retain(entry.channels)
        var flags: TokenTable.Flags = []
        if entry.pushToStart { flags.insert(.pushToStart) }
        if entry.frequentUpdates { flags.insert(.frequentUpdates) }
        if entry.supportsBroadcast { flags.insert(.supportsBroadcast) }

        var carriedBudget: UInt32 = 0
        if let existing = tokenIndex.find(entry.token, in: tokens) {
            let slot = Int(existing)
            let sameShape = tokens.channelSet[slot] == set && tokens.flags[slot].contains(.pushToStart) == entry.pushToStart
            if sameShape {
                // Same channels and kind: refresh in place (the common re-registration).
                tokens.flags[slot] = flags.union(.alive)
                tokens.registeredOrDiedAt[slot] = entry.registeredAt
                channelSets.release(set)
                return
            }
            // New channels or kind: retire the old slot (its memberships die with it), keep the budget.
            carriedBudget = tokens.budget[slot]
            remove(existing)
        }
        guard tokens.hasRoom(forTokenOf: entry.token.byteCount) else {
            // Reachable only past ~50 million 80-byte tokens in one shard: refuse this one, never trap.
            channelSets.release(set)
            registrationsRefused.add(1, ordering: .relaxed)
            return
        }
        let slot = tokens.insert(entry.token, flags: flags, registeredAt: entry.registeredAt, channelSet: set)
        tokens.budget[Int(slot)] = carriedBudget
        tokenIndex.insert(entry.token, slot: slot, in: tokens)
        let kind: Audience.Kind = entry.pushToStart ? .pushToStart : .update
        for channel in channelSets[set] {
            ensureChannel(Int(channel))
            audiences[Self.audienceIndex(Int(channel), kind)].append(slot: slot)
            tokens.addMembership(slot)
        }
    }

    /// Reserves room before a bulk load.
    func reserve(tokens count: Int) {
        precondition(tokens.aliveCount == 0, "reserve before the first token")
        tokens.reserve(count, tokenBytes: 80)
        tokenIndex = TokenSlotIndex(capacity: count)
    }

    /// Makes room for the audiences of `channel` (an engine channel id).
    private func ensureChannel(_ channel: Int) {
        assert(channel < FanoutEngine.maximumChannels)
        while audiences.count <= 2 * channel + 1 { audiences.append(Audience()) }
    }

    @inline(__always)
    static func audienceIndex(_ channel: Int, _ kind: Audience.Kind) -> Int { channel << 1 | Int(kind.rawValue) }

    /// Removes a token: dead from now on (waves that targeted it count it as invalidated).
    private func remove(_ slot: UInt32) {
        guard tokens.isAlive(slot) else { return }
        let token = tokens.token(slot)
        tokenIndex.remove(token, in: tokens)
        let kind: Audience.Kind = tokens.flags[Int(slot)].contains(.pushToStart) ? .pushToStart : .update
        for channel in channelSets[tokens.channelSet[Int(slot)]] {
            audiences[Self.audienceIndex(Int(channel), kind)].alive -= 1
        }
        if tokens.kill(slot, epoch: epoch) { slotFreed(slot) }
    }

    /// A dead slot no member points at any more went to the free list: its channel set is no longer used.
    private func slotFreed(_ slot: UInt32) {
        channelSets.release(tokens.channelSet[Int(slot)])
        tokens.channelSet[Int(slot)] = 0
    }

    func unregister(_ token: DeviceToken) {
        if let slot = tokenIndex.find(token, in: tokens) { remove(slot) }
    }

    private func retireChannel(_ channel: Int) {
        guard 2 * channel + 1 < audiences.count else { return }
        let audience = audiences[Self.audienceIndex(channel, .update)]
        for member in audience.slots.indices where tokens.isAlive(audience.slots[member]) { remove(audience.slots[member]) }
    }

    /// Drops the members of dead tokens from one audience (not under a cursor) and frees their token slots
    /// once nothing points at them.
    private func compact(_ audienceIndex: Int) {
        // Members move: a finished cursor's walk no longer names the right ones.
        audiences[audienceIndex].walk.reset()
        audiences[audienceIndex].walkValid = false
        let table = tokens  // views of the same columns: `isAlive` reads the live flags
        audiences[audienceIndex].compact(isAlive: { table.isAlive($0) }) { slot in
            if self.tokens.removeMembership(slot) { self.slotFreed(slot) }
        }
    }

    /// Whether an audience carries enough dead members to be worth a compaction pass.
    @inline(__always)
    private func worthCompacting(_ audienceIndex: Int) -> Bool {
        let dead = audiences[audienceIndex].deadCount
        return dead > max(64, audiences[audienceIndex].count / 8)
    }

    /// Compacts what is worth it and reports the channels still in use, so the engine can forget the rest.
    private func sweepChannels(_ sweep: ChannelSweep) {
        var used: [UInt16] = []
        for channel in 0..<audiences.count / 2 {
            var inUse = false
            for kind in [Audience.Kind.update, .pushToStart] {
                let audienceIndex = Self.audienceIndex(channel, kind)
                let audience = audiences[audienceIndex]
                if !audience.cursorActive && audience.deadCount > 0 && (audience.alive == 0 || worthCompacting(audienceIndex)) {
                    compact(audienceIndex)
                }
                if audiences[audienceIndex].isEmpty {
                    // Give a grown audience's memory back; the channel id may name another channel next.
                    if audiences[audienceIndex].hasGrown {
                        audiences[audienceIndex].deallocate()
                        audiences[audienceIndex] = Audience()
                    }
                } else {
                    inUse = true
                }
            }
            if inUse { used.append(UInt16(channel)) }
        }
        // Trailing channels nothing uses: drop their audiences altogether.
        while audiences.count >= 2 && audiences[audiences.count - 1].isEmpty && audiences[audiences.count - 2].isEmpty {
            audiences[audiences.count - 1].deallocate()
            audiences[audiences.count - 2].deallocate()
            audiences.removeLast(2)
        }
        // An idle broadcast lane whose budget has fully recovered holds nothing worth keeping; otherwise its
        // channel stays in use, so the id (and with it the budget its subscribers spent) stays the same.
        let nowTenths = tenths(monotonicNow())
        for (channel, lane) in broadcastLanes {
            if lane.isIdle && lane.budget <= nowTenths {
                broadcastLanes[channel] = nil
            } else if !used.contains(channel) {
                used.append(channel)
            }
        }
        sweep.answer(used: used)
    }

    private func countAudience(_ census: ChannelCensus) {
        census.answer(
            census.channels.map { id in
                let channel = Int(id)
                guard 2 * channel + 1 < audiences.count else { return (0, 0) }
                return (
                    audiences[Self.audienceIndex(channel, .update)].alive,
                    audiences[Self.audienceIndex(channel, .pushToStart)].alive
                )
            })
    }

    // MARK: - Commands

    func service(now: UInt64) {
        service(now: now, commandLimit: settings.commandsPerTick, workUntil: now &+ settings.controlWorkPerTick)
    }

    /// Takes the queued single pushes, then control commands up to `commandLimit` or until `workUntil` (monotonic
    /// ns; `.max` after the worker stopped: everything queued is taken).
    private func service(now: UInt64, commandLimit: Int, workUntil: UInt64) {
        // Single pushes first, all of them: taking one is an append, and poll sends them before any wave member.
        while let single = singles.dequeue() { readySingles.append(single) }
        // Then control work, within a count and a time budget per loop iteration (always at least one command): a
        // wave's start sorts its audience, and a flood of publishes must not keep this thread from its streams.
        // What is left waits here, and publishers meet back-pressure once the queue is full.
        var budget = commandLimit
        while budget > 0, let command = control.dequeue() {
            budget -= 1
            controlQueued.subtract(1, ordering: .relaxed)
            switch command {
            case .publish(let update): start(update)
            case .register(let batch): for entry in batch.entries { register(entry) }
            case .unregister(let batch): for token in batch.tokens { unregister(token) }
            case .retireChannel(let channel): retireChannel(Int(channel))
            case .sweepChannels(let sweep): sweepChannels(sweep)
            case .countAudience(let census): countAudience(census)
            case .resumeAfterBreaker(let prune): resumeAfterBreaker(pruneHeldTokens: prune, now: now)
            case .resumeWave(let resumed): resume(resumed.update, checkpoint: resumed.checkpoint, mode: resumed.mode)
            }
            if workUntil != .max && monotonicNow() >= workUntil { break }
        }
        liveTokens.store(tokens.aliveCount, ordering: .relaxed)
        // Once per loop iteration, not per push: another shard may have opened the breaker.
        if breaker.generation.load(ordering: .relaxed) & 1 == 1 { paused = true }
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
        if stopWavesRequested.load(ordering: .relaxed) {
            stoppingWaves = true
            inFlight.store(Int(pushesOut &- resultsBack), ordering: .relaxed)
        }
    }

    // MARK: - Waves

    private func start(_ update: PublishedUpdate) {
        let channel = Int(update.channel)
        ensureChannel(channel)
        let audienceIndex = Self.audienceIndex(channel, update.kind)
        precondition(update.sequence > audiences[audienceIndex].lastSequence, "updates of a channel arrived out of order")
        audiences[audienceIndex].lastSequence = update.sequence

        // The running wave, if any, stops here: its unvisited members get only the newer state, starting where
        // it had got to (the members that have gone longest without an update get the newest state first).
        var startKey = WalkKey.origin
        if audiences[audienceIndex].cursorActive {
            let old = Int(audiences[audienceIndex].currentWave) - 1
            startKey = cursorKey(audienceIndex)
            let skipped = waves[old]!.unvisited
            waves[old]!.tally.superseded.add(skipped, ordering: .relaxed)
            waves[old]!.unvisited = 0
            waves[old]!.outstanding -= skipped
            waves[old]!.cursorDone = true
            endCursor(audienceIndex)
            settleIfDone(old)
        }
        // Dead members would only cost visits and hold token slots: drop them while no cursor walks the
        // audience (busy members keep their places).
        if worthCompacting(audienceIndex) { compact(audienceIndex) }

        let sorted = walkSorter.sort(slots: audiences[audienceIndex].slots, tokens: tokens)
        let first = WalkSorter.lowerBound(startKey, in: sorted, slots: audiences[audienceIndex].slots, tokens: tokens)
        var walk = audiences[audienceIndex].walk
        walk.reset()
        walk.appendRange(sorted, from: first, count: sorted.count)
        walk.from = startKey
        walk.to = startKey
        walkSorter.releaseIfLarge()
        // A superseding wave starts at a key only its first checkpoint records: nothing goes out before that
        // checkpoint is durable. A wave that starts at the origin may go `window` members ahead at once (a
        // restart without its checkpoint counts those as possibly sent).
        let permit = checkpoints == nil ? Int.max : (startKey == .origin ? checkpointWindow : 0)
        begin(update, audienceIndex: audienceIndex, walk: walk, permit: permit, counted: 0)
        if startKey != .origin { checkpointDue = true }
    }

    /// Starts a wave on this shard over `walk` (positions still to visit); `counted` members already have their
    /// outcome in the tally (a resumed wave's checkpoint).
    private func begin(
        _ update: PublishedUpdate, audienceIndex: Int, walk: WaveWalk, permit: Int, counted: Int, possiblySent: Bool = false
    ) {
        let tally = update.wave.tallies[index]
        epoch &+= 1
        let remaining = walk.count
        tally.targeted.store(counted + remaining, ordering: .relaxed)
        let slot = allocateWaveSlot()
        waveOwners[slot] = update
        waves[slot] = ShardWave(
            update: update, tally: tally, channel: Int(update.channel), kind: update.kind, epoch: epoch,
            outstanding: remaining, unvisited: remaining, cursorDone: remaining == 0)
        if let part = update.wave.broadcast, part.shard == index, part.outcome == .pending {
            // The broadcast is one more outcome this shard owes the wave.
            waves[slot]!.outstanding += 1
            queueBroadcast(slot, channel: update.channel, possiblySent: possiblySent)
        }
        audiences[audienceIndex].walk = walk
        audiences[audienceIndex].walkValid = true
        audiences[audienceIndex].currentWave = UInt16(slot + 1)
        audiences[audienceIndex].visited = 0
        audiences[audienceIndex].lowWater = 0
        audiences[audienceIndex].permit = permit
        audiences[audienceIndex].proposedPermit = permit
        audiences[audienceIndex].proposedGeneration = 0
        audiences[audienceIndex].stalled = false
        if remaining > 0 {
            audiences[audienceIndex].cursorActive = true
            activeAudiences.append(audienceIndex)
        }
        settleIfDone(slot)
    }

    /// Where the audience's cursor is, as a key: the next member it would visit (its range start while it
    /// still visits carried-over members; the range end once it visited everything).
    func cursorKey(_ audienceIndex: Int) -> WalkKey {
        let audience = audiences[audienceIndex]
        let walk = audience.walk
        if audience.visited < walk.explicitCount { return walk.from }
        if audience.visited < walk.count { return walk.key(at: audience.visited, slots: audience.slots, tokens: tokens) }
        return walk.to
    }

    private func allocateWaveSlot() -> Int {
        if let slot = freeWaves.popLast() { return slot }
        // The engine refuses a publish past `maximumUnfinishedWaves` (≤ waveSlotLimit) engine-wide.
        precondition(waves.count < FanoutConfiguration.waveSlotLimit, "more unfinished waves than the engine admits")
        waves.append(nil)
        waveOwners.append(nil)
        return waves.count - 1
    }

    private func endCursor(_ audienceIndex: Int) {
        audiences[audienceIndex].cursorActive = false
        audiences[audienceIndex].stalled = false
        if let position = activeAudiences.firstIndex(of: audienceIndex) {
            activeAudiences.swapAt(position, activeAudiences.count - 1)
            activeAudiences.removeLast()
        }
    }

    /// One targeted member reached its outcome for `slot`'s wave.
    @inline(__always)
    private func settle(_ slot: Int) {
        waves[slot]!.outstanding -= 1
        assert(waves[slot]!.outstanding >= 0, "a wave settled more members than it targeted")
        if waves[slot]!.outstanding == 0 { settleIfDone(slot) }
    }

    /// Finishes the wave if the cursor is done and every targeted member has its outcome.
    private func settleIfDone(_ slot: Int) {
        guard let wave = waves[slot], wave.outstanding == 0, wave.cursorDone || wave.unvisited == 0 else { return }
        let audienceIndex = Self.audienceIndex(wave.channel, wave.kind)
        if checkpoints != nil { finalCheckpoint(slot) }
        if audiences[audienceIndex].currentWave == UInt16(slot + 1) {
            if audiences[audienceIndex].cursorActive { endCursor(audienceIndex) }
            audiences[audienceIndex].currentWave = 0
            audiences[audienceIndex].walk.reset()
            audiences[audienceIndex].walkValid = false
        }
        waves[slot] = nil
        freeWaves.append(slot)
        wave.update.wave.shardFinished(index)
        waveOwners[slot] = nil  // last: `wave`'s unowned references are used above
    }

    // MARK: - Producing pushes

    func poll(now: UInt64) -> ProducerPoll {
        ProducerPoll { poll(now: now, into: $0) }
    }

    /// Writes the next push straight into the worker's stream slot (`job`, uninitialized until `.produced`).
    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        if nextReadySingle < readySingles.count {
            job.initialize(to: sendSingle(now: now))
            return .produced
        }
        // Several nodes: wave pushes go out only while this node's lease on the shard lasts (on its own
        // monotonic clock, which runs on through a SIGSTOP: a node resumed past its lease sends nothing).
        if now >= sendUntil.load(ordering: .relaxed) { return .wait(until: now &+ 20_000_000) }
        // The breaker is open: waves wait (the resume command kicks the worker). A graceful shutdown stops them.
        if paused || stoppingWaves { return .wait(until: now &+ (stoppingWaves ? 5_000_000 : 1_000_000_000)) }
        // A broadcast reaches a whole channel's subscribers in one request: it goes before members.
        if broadcastsWaiting > 0, let broadcast = nextBroadcast(now: now) {
            job.initialize(to: broadcast)
            return .produced
        }
        // Members whose back-off or interval ended come first: they have waited longest.
        for lane in lanes.indices {
            while let raw = lanes[lane].popDue(now: now) {
                if resumeWaiting(MemberRef(raw: raw), now: now, into: job) { return .produced }
            }
        }
        while !activeAudiences.isEmpty {
            if nextActive >= activeAudiences.count { nextActive = 0 }
            let audienceIndex = activeAudiences[nextActive]
            nextActive += 1
            if visitNext(audienceIndex, now: now, into: job) { return .produced }
        }
        var wake = now &+ 1_000_000_000
        for lane in lanes { if let due = lane.nextDue { wake = min(wake, due) } }
        if broadcastsWaiting > 0 {
            for lane in broadcastLanes.values where lane.waiting != 0 && lane.inFlight == 0 { wake = min(wake, lane.notBefore) }
        }
        return .wait(until: wake)
    }

    /// Moves the cursor of one audience by one member; writes a push into `job` (true) if that member gets one now.
    private func visitNext(_ audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> Bool {
        let waveSlot = Int(audiences[audienceIndex].currentWave) - 1
        assert(waveSlot >= 0 && audiences[audienceIndex].cursorActive)
        let wave = waves[waveSlot]!
        if wave.update.deadline != 0 && now >= wave.update.deadline {
            // Too late to be worth showing: every member not reached yet expires here, unsent.
            let skipped = wave.unvisited
            wave.tally.expired.add(skipped, ordering: .relaxed)
            waves[waveSlot]!.unvisited = 0
            waves[waveSlot]!.outstanding -= skipped
            waves[waveSlot]!.cursorDone = true
            endCursor(audienceIndex)
            settleIfDone(waveSlot)
            return false
        }
        let position = audiences[audienceIndex].visited
        if position >= audiences[audienceIndex].permit {
            // As far ahead of the last durable checkpoint as the window allows: wait for the next one.
            stall(audienceIndex)
            return false
        }
        let count = audiences[audienceIndex].walk.count
        let member = Int(audiences[audienceIndex].walk.members[position])
        audiences[audienceIndex].visited += 1
        if audiences[audienceIndex].visited == count {
            waves[waveSlot]!.cursorDone = true
            endCursor(audienceIndex)
        }
        if audiences[audienceIndex].walk.possiblySent(position) {
            // It may have got this state before a restart: a delivery now may be its second.
            audiences[audienceIndex].attempts[member] |= Self.restartBit | Self.unconfirmedBit
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        var produced = false
        if !tokens.isAlive(tokenSlot) {
            // The walk holds the members alive at the start: this one died during the wave.
            waves[waveSlot]!.unvisited -= 1
            WaveTally.bump(wave.tally.invalidated)
            settle(waveSlot)
        } else {
            waves[waveSlot]!.unvisited -= 1
            produced = deliver(waveSlot, to: member, of: audienceIndex, now: now, into: job)
        }
        if waves[waveSlot] != nil && waves[waveSlot]!.cursorDone { settleIfDone(waveSlot) }
        return produced
    }

    /// The wave reached a live member: send now, or make it owed if the member is busy or too recent.
    private func deliver(
        _ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>
    ) -> Bool {
        switch audiences[audienceIndex].states[member] {
        case .inFlight, .waiting, .held:
            // It gets the newest state when its current push or back-off ends; an older owed state is dropped.
            let previous = Int(audiences[audienceIndex].owed[member]) - 1
            if previous >= 0 {
                WaveTally.bump(waves[previous]!.tally.superseded)
                settle(previous)
            }
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
            return false
        case .idle:
            assert(audiences[audienceIndex].owed[member] == 0, "an idle member owes nothing")
            if heldByInterval(audiences[audienceIndex].slots[member], now: now) {
                audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
                park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
                return false
            }
            send(waveSlot, to: member, of: audienceIndex, now: now, into: job)
            return true
        }
    }

    /// Whether the activity got a push less than the minimum interval ago.
    @inline(__always)
    private func heldByInterval(_ tokenSlot: UInt32, now: UInt64) -> Bool {
        guard settings.minimumInterval != 0 else { return false }
        let last = tokens.lastSentAt[Int(tokenSlot)]
        let intervalTenths = UInt32(settings.minimumInterval / 100_000_000)
        return tenths(now) &- last < intervalTenths
    }

    private func park(_ member: Int, of audienceIndex: Int, lane: Int, now: UInt64) {
        if audiences[audienceIndex].states[member] == .idle { audiences[audienceIndex].busy += 1 }
        audiences[audienceIndex].states[member] = .waiting
        let ref = MemberRef(channel: audienceIndex >> 1, kind: audienceIndex & 1 == 0 ? .update : .pushToStart, member: member)
        lanes[lane].push(ref.raw, at: now &+ lanes[lane].delay)
    }

    /// A member's wait ended: send what it is owed if that is still the newest state.
    private func resumeWaiting(_ ref: MemberRef, now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> Bool {
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        assert(audiences[audienceIndex].states[member] == .waiting)
        audiences[audienceIndex].states[member] = .idle
        audiences[audienceIndex].busy -= 1
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
        guard owedSlot >= 0 else { return false }
        let wave = waves[owedSlot]!
        if audiences[audienceIndex].currentWave != UInt16(owedSlot + 1) {
            // A newer wave exists and has not reached this member yet (else it would be owed that one):
            // the member gets only the newer state, from that wave's cursor.
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.superseded)
            settle(owedSlot)
            return false
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        if !tokens.isAlive(tokenSlot) {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.invalidated)
            settle(owedSlot)
            return false
        }
        if wave.update.deadline != 0 && now >= wave.update.deadline {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.expired)
            settle(owedSlot)
            return false
        }
        if heldByInterval(tokenSlot, now: now) {
            park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
            return false
        }
        audiences[audienceIndex].owed[member] = 0
        send(owedSlot, to: member, of: audienceIndex, now: now, into: job)
        return true
    }

    /// Writes the push into `job` (the worker's stream slot): shared payload bytes, this token, the priority its
    /// budget allows.
    private func send(_ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64, into job: UnsafeMutablePointer<PushJob>) {
        let wave = waves[waveSlot]!
        let update = wave.update
        let tokenSlot = Int(audiences[audienceIndex].slots[member])
        let nowTenths = tenths(now)
        var priority = PushPriority.normal
        let wantsImmediate: Bool
        switch update.priority {
        case .auto: wantsImmediate = update.hasAlert
        case .immediate: wantsImmediate = true
        case .normal: wantsImmediate = false
        }
        if wantsImmediate {
            let budget = tokens.flags[tokenSlot].contains(.frequentUpdates) ? frequentBudget : standardBudget
            if budget.trySpend(&tokens.budget[tokenSlot], now: nowTenths) {
                priority = .immediate
            } else {
                WaveTally.bump(wave.tally.downgraded)
            }
        }
        tokens.lastSentAt[tokenSlot] = nowTenths
        pushesOut &+= 1
        WaveTally.bump(wave.tally.sent)
        if audiences[audienceIndex].attempts[member] & Self.restartBit != 0 {
            audiences[audienceIndex].attempts[member] &= ~Self.restartBit
            WaveTally.bump(wave.tally.resentAfterRestart)
        }
        if audiences[audienceIndex].states[member] == .idle { audiences[audienceIndex].busy += 1 }
        audiences[audienceIndex].states[member] = .inFlight
        let ref = MemberRef(channel: audienceIndex >> 1, kind: audienceIndex & 1 == 0 ? .update : .pushToStart, member: member)
        let token = tokens.token(UInt32(tokenSlot))
        let payload: PushPayload
        if let channelPayload = update.channelPayload, tokens.flags[tokenSlot].contains(.supportsBroadcast) {
            payload = channelPayload
        } else {
            payload = update.payload
        }
        // The same id on every attempt, before and after a restart: a resend is recognisable as one.
        job.initialize(
            to: PushJob(
                token: token, payload: payload, priority: priority, expiration: update.expiration,
                collapseID: update.collapseID, apnsID: PushIdentifier.waveID(wave: update.wave.id, token: token),
                cookie: FanoutCookie.make(ref, wave: waveSlot)))
    }

    // MARK: - Broadcasts

    /// `slot`'s wave has a broadcast this shard sends: it waits in its channel's lane (replacing an older one
    /// still waiting there, which ends superseded).
    private func queueBroadcast(_ slot: Int, channel: UInt16, possiblySent: Bool) {
        var lane = broadcastLanes[channel] ?? BroadcastLane()
        if lane.waiting != 0 {
            let older = lane.waiting - 1
            waves[older]!.update.wave.broadcast!.finish(.superseded)
            settle(older)
        } else {
            broadcastsWaiting += 1
        }
        lane.waiting = slot + 1
        lane.waitingPossiblySent = possiblySent
        lane.waitingUnanswered = false
        broadcastLanes[channel] = lane
    }

    /// The first broadcast free to go now (none out on its channel, its back-off over), as a push.
    private func nextBroadcast(now: UInt64) -> PushJob? {
        for (channel, lane) in broadcastLanes where lane.waiting != 0 && lane.inFlight == 0 && lane.notBefore <= now {
            let slot = lane.waiting - 1
            let wave = waves[slot]!
            let update = wave.update
            let part = update.wave.broadcast!
            broadcastLanes[channel]!.waiting = 0
            broadcastsWaiting -= 1
            if update.deadline != 0 && now >= update.deadline {
                part.finish(.expired)
                broadcastLanes[channel]!.attempt = 0
                settle(slot)
                continue
            }
            var priority = PushPriority.normal
            var downgraded = false
            let wantsImmediate: Bool
            switch update.priority {
            case .auto: wantsImmediate = update.hasAlert
            case .immediate: wantsImmediate = true
            case .normal: wantsImmediate = false
            }
            if wantsImmediate {
                if standardBudget.trySpend(&broadcastLanes[channel]!.budget, now: tenths(now)) {
                    priority = .immediate
                } else {
                    downgraded = true
                }
            }
            part.recordRequest(priority: priority, downgraded: downgraded)
            if broadcastLanes[channel]!.waitingPossiblySent {
                broadcastLanes[channel]!.waitingPossiblySent = false
                part.markResent()
            }
            broadcastLanes[channel]!.inFlight = slot + 1
            broadcastLanes[channel]!.waitingUnanswered = false
            pushesOut &+= 1
            return PushJob(
                channel: part.channelID, payload: update.payload, priority: priority, expiration: part.expiration,
                apnsID: part.apnsID, cookie: FanoutCookie.broadcast(channel: Int(channel), wave: slot))
        }
        return nil
    }

    /// APNs answered a broadcast (or it failed): its outcome, a retry, or the newer broadcast waiting behind it.
    private func broadcastCompleted(_ result: PushResult, waveSlot: Int, now: UInt64) {
        let channel = UInt16(FanoutCookie.broadcastChannel(result.cookie))
        guard var lane = broadcastLanes[channel], lane.inFlight == waveSlot + 1, let wave = waves[waveSlot],
            let part = wave.update.wave.broadcast
        else {
            assertionFailure("a result for a broadcast that is not in flight")
            return
        }
        lane.inFlight = 0
        if case .failed = result.disposition {} else { wave.tally.recordAck(now: now) }
        var outcome: (BroadcastOutcome, Int?)?
        switch result.disposition.action {
        case .delivered:
            outcome = (.delivered, nil)
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            let reason = FailureReason.index(of: result.disposition)
            if case .failed(.shutdown) = result.disposition {
                if checkpoints != nil && lane.waiting == 0 {
                    // A graceful shutdown of a durable engine: it waits for the next engine, possibly sent.
                    lane.waiting = waveSlot + 1
                    lane.waitingPossiblySent = true
                    broadcastsWaiting += 1
                } else {
                    outcome = lane.waiting != 0 ? (.superseded, nil) : (.failed, reason)
                }
            } else if case .failed(.unconfirmed) = result.disposition, !settings.retryUnconfirmed {
                outcome = (.failed, reason)
            } else if lane.attempt >= maxRetries {
                outcome = (.failed, reason)
            } else {
                // Back off (APNs throttles broadcasts too, §7.5), then send the newest state: this one again, or
                // the newer one waiting behind it (then this one is superseded).
                lane.attempt += 1
                lane.notBefore = now &+ settings.retryDelays[lane.attempt - 1]
                if lane.waiting != 0 {
                    outcome = (.superseded, nil)
                } else {
                    lane.waiting = waveSlot + 1
                    if case .failed = result.disposition { lane.waitingUnanswered = true }
                    broadcastsWaiting += 1
                }
            }
        case .fixConfiguration, .discardMessage, .dropToken:
            outcome = (.failed, FailureReason.index(of: result.disposition))
        }
        if let (final, reason) = outcome {
            if final != .superseded {
                lane.attempt = 0
                lane.notBefore = 0
            }
            broadcastLanes[channel] = lane
            part.finish(final, reason: reason)
            settle(waveSlot)
        } else {
            broadcastLanes[channel] = lane
        }
    }

    /// What a checkpoint of `slot`'s wave records of its broadcast (nil: none, or another shard sends it).
    private func broadcastSnapshot(_ slot: Int) -> ShardCheckpoint.Broadcast? {
        guard let update = waveOwners[slot], let part = update.wave.broadcast, part.shard == index else { return nil }
        let lane = broadcastLanes[update.channel]
        let inFlight = lane?.inFlight == slot + 1
        let unanswered = lane?.waiting == slot + 1 && (lane!.waitingUnanswered || lane!.waitingPossiblySent)
        return part.snapshot(possiblySent: inFlight || unanswered)
    }

    // MARK: - Single pushes

    /// Single pushes queued by `service`, sent before wave members (FIFO; the array is reset when drained).
    @exclusivity(unchecked) private var readySingles: [SinglePush] = []
    @exclusivity(unchecked) private var nextReadySingle = 0
    /// Single pushes in flight, by the slot in their cookie.
    @exclusivity(unchecked) private var singlesInFlight: [SinglePush?] = []
    @exclusivity(unchecked) private var freeSingleSlots: [Int] = []

    private func sendSingle(now: UInt64) -> PushJob {
        let single = readySingles[nextReadySingle]
        nextReadySingle += 1
        if nextReadySingle == readySingles.count {
            readySingles.removeAll(keepingCapacity: true)
            nextReadySingle = 0
        }
        let slot: Int
        if let free = freeSingleSlots.popLast() {
            slot = free
            singlesInFlight[slot] = single
        } else {
            slot = singlesInFlight.count
            singlesInFlight.append(single)
        }
        var job = single.job
        // A registered token's activity budget applies to single pushes too.
        if let tokenSlot = tokenIndex.find(job.token, in: tokens) {
            let index = Int(tokenSlot)
            if job.priority == .immediate {
                let budget = tokens.flags[index].contains(.frequentUpdates) ? frequentBudget : standardBudget
                if !budget.trySpend(&tokens.budget[index], now: tenths(now)) { job.priority = .normal }
            }
            tokens.lastSentAt[index] = tenths(now)
        }
        single.job.priority = job.priority
        job.cookie = FanoutCookie.single(slot)
        pushesOut &+= 1
        return job
    }

    private func singleCompleted(_ result: PushResult) {
        let slot = FanoutCookie.member(result.cookie).member
        guard let single = singlesInFlight[slot] else {
            assertionFailure("a result for a single push that is not in flight")
            return
        }
        singlesInFlight[slot] = nil
        freeSingleSlots.append(slot)
        if result.disposition.action == .dropToken {
            if let (reason, timestamp) = suspect(result.disposition) {
                // The caller gets APNs' answer now; whether the token goes waits for the window's verdict.
                heldSingles.append(HeldSingle(token: result.token, reason: reason, timestamp: timestamp))
                countHeld(reason)
            } else if let tokenSlot = tokenIndex.find(result.token, in: tokens) {
                let (reason, timestamp) = Self.rejection(result.disposition)
                invalidate(tokenSlot, reason: reason, timestamp: timestamp)
            }
        }
        var result = result
        result.cookie = single.job.cookie  // the caller's own
        single.completion(result)
    }

    // MARK: - Results

    /// On the worker thread: the push for one member of one wave (or a single push) ended.
    func pushCompleted(_ result: PushResult, now: UInt64) {
        resultsBack &+= 1
        let waveSlot = FanoutCookie.wave(result.cookie)
        if FanoutCookie.isBroadcast(result.cookie) {
            broadcastCompleted(result, waveSlot: waveSlot, now: now)
        } else if waveSlot == FanoutCookie.singlePush {
            singleCompleted(result)
        } else {
            memberCompleted(
                cookie: result.cookie, disposition: result.disposition, possibleDuplicate: result.possibleDuplicate,
                waveSlot: waveSlot, now: now)
        }
        resultTaken(now: now)
    }

    /// The same, read in place from the client's stream slot: a wave member's result needs no `PushResult`.
    func pushCompleted(_ completion: borrowing PushCompletion, now: UInt64) {
        let cookie = completion.cookie
        let waveSlot = FanoutCookie.wave(cookie)
        guard !FanoutCookie.isBroadcast(cookie) && waveSlot != FanoutCookie.singlePush else {
            pushCompleted(completion.result, now: now)
            return
        }
        resultsBack &+= 1
        memberCompleted(
            cookie: cookie, disposition: completion.disposition, possibleDuplicate: completion.possibleDuplicate,
            waveSlot: waveSlot, now: now)
        resultTaken(now: now)
    }

    private func resultTaken(now: UInt64) {
        // Judge the window when it is full, or early when answers are held and the shard has nothing else
        // coming (a small wave would otherwise wait for a thousand more results).
        if resultsBack == windowEnd || (heldTotal != 0 && resultsBack == pushesOut && nothingToSend) {
            judgeWindow(now: now)
        }
    }

    @inline(__always)
    private func memberCompleted(cookie: UInt64, disposition: PushDisposition, possibleDuplicate: Bool, waveSlot: Int, now: UInt64) {
        let ref = FanoutCookie.member(cookie)
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        assert(audiences[audienceIndex].states[member] == .inFlight, "a result for a member with nothing in flight")
        audiences[audienceIndex].states[member] = .idle
        audiences[audienceIndex].busy -= 1
        let tally = waves[waveSlot]!.tally
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1

        if case .failed = disposition {} else { tally.recordAck(now: now) }
        switch disposition.action {
        case .delivered:
            WaveTally.bump(tally.delivered)
            // A delivery after an unconfirmed attempt of the same state (ours or the client's resend) may be
            // the second one the device sees.
            if audiences[audienceIndex].attempts[member] & Self.unconfirmedBit != 0 || possibleDuplicate {
                WaveTally.bump(tally.possibleDuplicates)
            }
            audiences[audienceIndex].attempts[member] = 0
            settle(waveSlot)
        case .dropToken:
            if let (reason, timestamp) = suspect(disposition) {
                // Maybe a configuration mistake, not a dead token: the outcome waits for the window's verdict.
                audiences[audienceIndex].states[member] = .held
                audiences[audienceIndex].busy += 1
                heldMembers.append(HeldMember(ref: ref, wave: waveSlot, reason: reason, timestamp: timestamp))
                countHeld(reason)
                return
            }
            WaveTally.bump(tally.invalidated)
            settle(waveSlot)
            let (reason, timestamp) = Self.rejection(disposition)
            invalidate(audiences[audienceIndex].slots[member], reason: reason, timestamp: timestamp)
            audiences[audienceIndex].attempts[member] = 0
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                WaveTally.bump(waves[owedSlot]!.tally.invalidated)
                settle(owedSlot)
            }
            return
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            if case .failed(.unconfirmed) = disposition, !settings.retryUnconfirmed {
                // APNs may have it: by default not sent again (see `FanoutConfiguration.retryUnconfirmed`).
                failForGood(waveSlot, member: member, of: audienceIndex, reason: FailureReason.unconfirmed)
                break
            }
            retry(waveSlot, member: member, of: audienceIndex, disposition: disposition, now: now)
            return
        case .fixConfiguration, .discardMessage:
            failForGood(waveSlot, member: member, of: audienceIndex, reason: FailureReason.index(of: disposition))
        }
        // A newer state arrived while this push was out: send it next.
        if owedSlot >= 0 { park(member, of: audienceIndex, lane: Self.readyLane, now: now) }
    }

    private func failForGood(_ waveSlot: Int, member: Int, of audienceIndex: Int, reason: Int) {
        waves[waveSlot]!.tally.recordFailure(reason: reason)
        audiences[audienceIndex].attempts[member] = 0
        settle(waveSlot)
    }

    /// `attempts` bit: an earlier attempt of the member's current state went out unconfirmed (it may have
    /// reached APNs); the low bits count retries.
    private static let unconfirmedBit: UInt8 = 0x80
    /// `attempts` bit: the member may have got this wave's state before a restart; its next send counts in
    /// `resentAfterRestart` (once).
    static let restartBit: UInt8 = 0x40

    /// A transient failure: back off, then send the newest state (never a superseded one).
    private func retry(_ waveSlot: Int, member: Int, of audienceIndex: Int, disposition: PushDisposition, now: UInt64) {
        let reason = FailureReason.index(of: disposition)
        if case .failed(.shutdown) = disposition, checkpoints != nil {
            // A graceful shutdown of a durable engine: the member stays owed (it may have got the push: the
            // next engine resends it as possibly sent).
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if owedSlot >= 0 {
                WaveTally.bump(waves[waveSlot]!.tally.superseded)
                settle(waveSlot)
            } else {
                audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
                audiences[audienceIndex].attempts[member] |= Self.unconfirmedBit
            }
            audiences[audienceIndex].states[member] = .waiting
            audiences[audienceIndex].busy += 1
            return
        }
        if case .failed(.shutdown) = disposition {
            waves[waveSlot]!.tally.recordFailure(reason: reason)
            settle(waveSlot)
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            return
        }
        let previous = audiences[audienceIndex].attempts[member] & ~Self.restartBit
        let attempt = Int(previous & ~Self.unconfirmedBit) + 1
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
        if attempt > maxRetries {
            // Out of retries: this wave fails with the last reason, and so does a newer one it owes.
            audiences[audienceIndex].attempts[member] = 0
            waves[waveSlot]!.tally.recordFailure(reason: reason)
            settle(waveSlot)
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            return
        }
        if owedSlot >= 0 {
            // The retry carries the newer state; this wave's push is superseded for this member (and the newer
            // state has not been sent before: no duplicate to fear).
            audiences[audienceIndex].attempts[member] = UInt8(attempt)
            WaveTally.bump(waves[waveSlot]!.tally.superseded)
            settle(waveSlot)
        } else {
            var unconfirmed = previous & Self.unconfirmedBit
            if case .failed(.unconfirmed) = disposition { unconfirmed = Self.unconfirmedBit }
            audiences[audienceIndex].attempts[member] = UInt8(attempt) | unconfirmed
            WaveTally.bump(waves[waveSlot]!.tally.retried)
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
        }
        park(member, of: audienceIndex, lane: Self.firstRetryLane + attempt - 1, now: now)
    }

    private func invalidate(_ tokenSlot: UInt32, reason: APNsReason?, timestamp: Int64?) {
        guard tokens.isAlive(tokenSlot) else { return }
        // A 410 older than the token's latest registration is stale news: the app registered it again since.
        if let timestamp, Int64(tokens.registeredOrDiedAt[Int(tokenSlot)]) * 1000 > timestamp { return }
        let token = tokens.token(tokenSlot)
        remove(tokenSlot)
        invalidations.tokenInvalidated(token, reason: reason, invalidSince: timestamp)
    }

    /// The reason and timestamp of a rejection.
    private static func rejection(_ disposition: PushDisposition) -> (APNsReason?, Int64?) {
        if case .rejected(_, let reason, _, _, let timestamp) = disposition { return (reason, timestamp) }
        return (nil, nil)
    }

    // MARK: - The invalid-token breaker

    /// A BadDeviceToken / DeviceTokenNotForTopic answer, which the breaker judges before a token is pruned.
    @inline(__always)
    private func suspect(_ disposition: PushDisposition) -> (APNsReason, Int64?)? {
        guard breaker.configuration.isEnabled, case .rejected(_, let reason?, _, _, let timestamp) = disposition,
            reason == .badDeviceToken || reason == .deviceTokenNotForTopic
        else { return nil }
        return (reason, timestamp)
    }

    private func countHeld(_ reason: APNsReason) {
        if reason == .badDeviceToken { windowBadDeviceToken += 1 } else { windowNotForTopic += 1 }
        heldTotal += 1
        heldCount.store(heldTotal, ordering: .relaxed)
    }

    private var nothingToSend: Bool {
        activeAudiences.isEmpty && nextReadySingle == readySingles.count && lanes.allSatisfy(\.isEmpty) && broadcastsWaiting == 0
    }

    private func startWindow() {
        windowStart = resultsBack
        windowEnd = resultsBack &+ UInt64(breaker.configuration.window)
        windowBadDeviceToken = 0
        windowNotForTopic = 0
    }

    /// The window ended: an abnormal share of bad-token answers opens the breaker (and nothing is pruned);
    /// otherwise the held tokens are pruned as dead.
    private func judgeWindow(now: UInt64) {
        defer { startWindow() }
        guard !paused else { return }
        let configuration = breaker.configuration
        let results = Int(resultsBack &- windowStart)
        let suspects = windowBadDeviceToken + windowNotForTopic
        if suspects >= configuration.minimumSuspects && Double(suspects) > configuration.maximumShare * Double(results) {
            paused = true
            breaker.open(
                shard: index, results: results, badDeviceToken: windowBadDeviceToken, deviceTokenNotForTopic: windowNotForTopic)
        } else if breaker.isOpen {
            paused = true  // another shard opened it this very iteration: keep what is held
        } else if heldTotal > 0 {
            releaseHeld(prune: true, resend: false, now: now)
        }
    }

    /// The operator closed the breaker: settle what is held and let the waves go on.
    private func resumeAfterBreaker(pruneHeldTokens: Bool, now: UInt64) {
        paused = false
        releaseHeld(prune: pruneHeldTokens, resend: true, now: now)
        startWindow()
    }

    /// Gives every held answer its outcome. `prune`: the tokens are dead (invalidated, removed, reported to
    /// the registry). Otherwise they stay: the wave counts a failure with APNs' reason, and with `resend` a
    /// member owed a newer state gets it.
    private func releaseHeld(prune: Bool, resend: Bool, now: UInt64) {
        for held in heldMembers {
            let audienceIndex = Self.audienceIndex(held.ref.channel, held.ref.kind)
            let member = held.ref.member
            assert(audiences[audienceIndex].states[member] == .held)
            audiences[audienceIndex].states[member] = .idle
            audiences[audienceIndex].busy -= 1
            audiences[audienceIndex].attempts[member] = 0
            let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
            if prune {
                WaveTally.bump(waves[held.wave]!.tally.invalidated)
                settle(held.wave)
                invalidate(audiences[audienceIndex].slots[member], reason: held.reason, timestamp: held.timestamp)
                if owedSlot >= 0 {
                    audiences[audienceIndex].owed[member] = 0
                    WaveTally.bump(waves[owedSlot]!.tally.invalidated)
                    settle(owedSlot)
                }
            } else {
                waves[held.wave]!.tally.recordFailure(reason: FailureReason.index(of: held.reason))
                settle(held.wave)
                if owedSlot >= 0 && resend { park(member, of: audienceIndex, lane: Self.readyLane, now: now) }
            }
        }
        heldMembers.removeAll(keepingCapacity: heldMembers.capacity <= 4096)
        if prune {
            for held in heldSingles {
                if let slot = tokenIndex.find(held.token, in: tokens) {
                    invalidate(slot, reason: held.reason, timestamp: held.timestamp)
                }
            }
        }
        heldSingles.removeAll(keepingCapacity: heldSingles.capacity <= 4096)
        heldTotal = 0
        heldCount.store(0, ordering: .relaxed)
    }

    // MARK: - Checkpoints (durable waves)

    /// Before the worker starts.
    func configureCheckpoints(_ writer: CheckpointWriter, _ configuration: CheckpointConfiguration) {
        checkpoints = writer
        checkpointWindow = configuration.window
        checkpointInterval = max(1_000_000, FanoutEngine.nanoseconds(configuration.interval))
        checkpointPushes = UInt64(configuration.pushes)
    }

    /// The cursor reached its permit: out of the round-robin until a durable checkpoint moves the permit.
    private func stall(_ audienceIndex: Int) {
        audiences[audienceIndex].stalled = true
        if let position = activeAudiences.firstIndex(of: audienceIndex) {
            activeAudiences.swapAt(position, activeAudiences.count - 1)
            activeAudiences.removeLast()
        }
        stalledAudiences.append(audienceIndex)
        checkpointDue = true
    }

    /// Checkpoints up to generation `durable` are on disk: their permits apply.
    private func applyPermits(durable: UInt64) {
        for audienceIndex in activeAudiences + stalledAudiences {
            let audience = audiences[audienceIndex]
            guard audience.proposedGeneration != 0, audience.proposedGeneration <= durable else { continue }
            audiences[audienceIndex].permit = max(audience.permit, audience.proposedPermit)
        }
        var still: [Int] = []
        for audienceIndex in stalledAudiences {
            guard audiences[audienceIndex].stalled, audiences[audienceIndex].cursorActive else { continue }
            if audiences[audienceIndex].visited < audiences[audienceIndex].permit {
                audiences[audienceIndex].stalled = false
                activeAudiences.append(audienceIndex)
            } else {
                still.append(audienceIndex)
            }
        }
        stalledAudiences = still
    }

    /// Records every unfinished wave's progress and hands it to the writer (not per push: every
    /// `interval` or `pushes`).
    private func takeCheckpoint(now: UInt64) {
        checkpointDue = false
        nextCheckpointAt = now &+ checkpointInterval
        pushesAtCheckpoint = pushesOut
        guard let checkpoints else { return }
        checkpointGeneration &+= 1
        var items: [WaveCheckpoint] = []
        let savedAt = Int64(time(nil)) * 1000
        for slot in waves.indices where waves[slot] != nil {
            let checkpoint = progress(of: slot)
            items.append(WaveCheckpoint(waveID: waves[slot]!.update.wave.id, shard: index, data: checkpoint.encoded(), savedAt: savedAt))
        }
        guard !items.isEmpty else { return }
        checkpoints.submit(shard: index, generation: checkpointGeneration, items)
    }

    /// The wave is done on this shard: its last checkpoint says so (the store drops it once the wave completes).
    private func finalCheckpoint(_ slot: Int) {
        guard let checkpoints, let wave = waves[slot] else { return }
        var checkpoint = ShardCheckpoint()
        checkpoint.finished = true
        checkpoint.rangeDone = true
        checkpoint.restarts = wave.update.wave.restarts
        (checkpoint.counters, checkpoint.failures, checkpoint.firstAck, checkpoint.lastAck) = wave.tally.snapshot(
            publishedAt: wave.update.wave.publishedAt)
        checkpoint.broadcast = broadcastSnapshot(slot)
        checkpointGeneration &+= 1
        checkpoints.submit(
            shard: index, generation: checkpointGeneration,
            [WaveCheckpoint(waveID: wave.update.wave.id, shard: index, data: checkpoint.encoded(), savedAt: Int64(time(nil)) * 1000)])
    }

    /// One wave's progress on this shard now, and the permit it asks for. `final`: the shard sends nothing
    /// more (a graceful shutdown), so nothing past the cursor can have gone out after this.
    private func progress(of slot: Int, final: Bool = false) -> ShardCheckpoint {
        let wave = waves[slot]!
        var checkpoint = ShardCheckpoint()
        checkpoint.restarts = wave.update.wave.restarts
        (checkpoint.counters, checkpoint.failures, checkpoint.firstAck, checkpoint.lastAck) = wave.tally.snapshot(
            publishedAt: wave.update.wave.publishedAt)
        checkpoint.broadcast = broadcastSnapshot(slot)
        let audienceIndex = Self.audienceIndex(wave.channel, wave.kind)
        guard audiences[audienceIndex].currentWave == UInt16(slot + 1) else {
            // A newer wave took the audience over: what is left of this one ends superseded at a restart.
            checkpoint.superseded = true
            checkpoint.rangeDone = true
            return checkpoint
        }
        let audience = audiences[audienceIndex]
        let walk = audience.walk
        let visited = audience.visited
        var pending: [ShardCheckpoint.Pending] = []
        func possiblySent(_ member: Int) -> Bool {
            audience.states[member] == .inFlight || audience.attempts[member] & (Self.unconfirmedBit | Self.restartBit) != 0
        }
        if audience.walkValid {
            var low = audience.lowWater
            while low < visited && audience.states[Int(walk.members[low])] == .idle { low += 1 }
            audiences[audienceIndex].lowWater = low
            for position in low..<visited {
                let member = Int(walk.members[position])
                if audience.states[member] != .idle {
                    pending.append(.init(hash: walk.hashes[position], possiblySent: possiblySent(member)))
                }
            }
            // Past the cursor, pushes may go out up to the permit this checkpoint grants (none after a final one);
            // a resumed wave's range may also hold members an earlier run possibly sent.
            let alreadySent = walk.explicitCount + walk.rangePossiblySent
            let highPosition = min(walk.count, final ? max(visited, alreadySent) : max(visited, alreadySent) &+ checkpointWindow)
            if visited < walk.explicitCount {
                for position in visited..<walk.explicitCount {
                    let mayHaveGone = walk.possiblySent(position) || (!final && position < highPosition)
                    pending.append(.init(hash: walk.hashes[position], possiblySent: mayHaveGone))
                }
            }
            if visited >= walk.count {
                checkpoint.rangeDone = true
            } else {
                checkpoint.from = cursorKey(audienceIndex)
                checkpoint.to = walk.to
                checkpoint.highWater = highPosition >= walk.count ? nil : walk.key(at: highPosition, slots: audience.slots, tokens: tokens)
                audiences[audienceIndex].proposedPermit = highPosition
                audiences[audienceIndex].proposedGeneration = checkpointGeneration
            }
        } else {
            // The cursor is done and compaction moved members: every busy member is one this wave still owes.
            checkpoint.rangeDone = true
            for member in 0..<audience.count where audience.states[member] != .idle {
                pending.append(.init(hash: TokenHash.of(tokens.bytes(audience.slots[member])), possiblySent: possiblySent(member)))
            }
        }
        checkpoint.pending = pending
        return checkpoint
    }

    /// How a wave found unfinished at start-up goes on.
    enum ResumeMode: Sendable {
        /// Its remaining members get it (the newest state of their channel).
        case resume
        /// A newer wave of the channel exists: what is left ends superseded (the newer one delivers).
        case supersede
        /// Past `freshUntil`: what is left ends expired, unsent.
        case expire
    }

    /// Before the worker starts: picks up a wave from its checkpoint on this shard (nil: none was durable, so
    /// the wave starts over here, the first `window` members counted as possibly sent).
    func resume(_ update: PublishedUpdate, checkpoint: ShardCheckpoint?, mode: ResumeMode) {
        let tally = update.wave.tallies[index]
        let channel = Int(update.channel)
        ensureChannel(channel)
        let audienceIndex = Self.audienceIndex(channel, update.kind)
        precondition(update.sequence > audiences[audienceIndex].lastSequence, "resumed waves arrive in publish order")
        audiences[audienceIndex].lastSequence = update.sequence
        let part = update.wave.broadcast.flatMap { $0.shard == index ? $0 : nil }
        if let checkpoint, let state = checkpoint.broadcast { part?.restore(state) }
        if let checkpoint {
            tally.restore(checkpoint)
            let publishedAt = update.wave.publishedAt
            if checkpoint.firstAck != 0 { tally.firstAck.store(publishedAt &+ checkpoint.firstAck, ordering: .relaxed) }
            if checkpoint.lastAck != 0 { tally.lastAck.store(publishedAt &+ checkpoint.lastAck, ordering: .relaxed) }
        }
        if let checkpoint, checkpoint.finished {
            update.wave.shardFinished(index)
            return
        }
        if let part, part.outcome == .pending, checkpoint?.superseded == true || mode != .resume {
            // Nothing more of this wave goes out: a newer one carries the channel's state (or it is stale).
            part.finish(mode == .expire ? .expired : .superseded)
        }
        if let checkpoint, checkpoint.superseded {
            let left = max(0, checkpoint.counters.targeted - checkpoint.counters.accounted)
            tally.superseded.store(checkpoint.counters.superseded + left, ordering: .relaxed)
            update.wave.shardFinished(index)
            return
        }
        let counted = checkpoint?.counters.accounted ?? 0
        let (walk, missing) = resumedWalk(audienceIndex, checkpoint: checkpoint)
        switch mode {
        case .resume:
            // Pending members whose token is gone (invalidated or unregistered while down) end invalidated.
            if missing > 0 { tally.invalidated.store(tally.invalidated.load(ordering: .relaxed) + missing, ordering: .relaxed) }
            let permit = checkpoints == nil ? Int.max : walk.explicitPossiblySent
            // Without a checkpoint that says otherwise, the broadcast may have gone out before the restart.
            let broadcastPossiblySent = checkpoint?.broadcast?.possiblySent ?? true
            begin(
                update, audienceIndex: audienceIndex, walk: walk, permit: permit, counted: counted + missing,
                possiblySent: broadcastPossiblySent)
            checkpointDue = true
        case .supersede, .expire:
            let left = walk.count + missing
            if mode == .supersede {
                tally.superseded.store(tally.superseded.load(ordering: .relaxed) + left, ordering: .relaxed)
            } else {
                tally.expired.store(tally.expired.load(ordering: .relaxed) + left, ordering: .relaxed)
            }
            tally.targeted.store(counted + left, ordering: .relaxed)
            walk.deallocate()
            update.wave.shardFinished(index)
        }
    }

    /// The members a resumed wave still has to visit: the checkpoint's pending ones (possibly sent first), then
    /// its key range. Also how many pending members are no longer here.
    private func resumedWalk(_ audienceIndex: Int, checkpoint: ShardCheckpoint?) -> (WaveWalk, missing: Int) {
        let slots = audiences[audienceIndex].slots
        let sorted = walkSorter.sort(slots: slots, tokens: tokens)
        var walk = WaveWalk()
        let everythingSent = checkpoints == nil
        guard let checkpoint else {
            walk.appendRange(sorted, from: 0, count: sorted.count)
            walk.rangePossiblySent = everythingSent ? sorted.count : min(sorted.count, checkpointWindow == Int.max ? sorted.count : checkpointWindow)
            walkSorter.releaseIfLarge()
            return (walk, 0)
        }
        // The range still to visit, as positions of `sorted`.
        var rangeFirst = 0
        var rangeCount = 0
        var rangeSent = 0
        if !checkpoint.rangeDone && sorted.count > 0 {
            rangeFirst = WalkSorter.lowerBound(checkpoint.from, in: sorted, slots: slots, tokens: tokens)
            let end = WalkSorter.lowerBound(checkpoint.to, in: sorted, slots: slots, tokens: tokens)
            // Members from `from` up to `to`, wrapping past the end of the order when `to` comes before `from`.
            // Positions alone cannot tell "nothing left" from "everything left" when they coincide (a cursor
            // that had not moved yet: from = the first member's key, to = the origin): the keys' order can.
            func members(upTo position: Int, key: WalkKey) -> Int {
                if key == checkpoint.from { return 0 }
                if WalkKey.precedes(checkpoint.from, key) { return max(0, position - rangeFirst) }
                return sorted.count - rangeFirst + position
            }
            rangeCount = checkpoint.from == checkpoint.to ? sorted.count : members(upTo: end, key: checkpoint.to)
            if let high = checkpoint.highWater {
                let highPosition = WalkSorter.lowerBound(high, in: sorted, slots: slots, tokens: tokens)
                rangeSent = min(rangeCount, members(upTo: highPosition, key: high))
            } else {
                rangeSent = rangeCount
            }
        }
        func inRange(_ position: Int) -> Bool {
            rangeCount > 0 && (position - rangeFirst + sorted.count) % sorted.count < rangeCount
        }
        // Pending members, found by hash (a hash shared by two tokens brings both: one more push at most).
        var missing = 0
        var sentFirst: [UInt32] = []
        var others: [UInt32] = []
        var sentHashes: [UInt64] = []
        var otherHashes: [UInt64] = []
        for item in checkpoint.pending {
            var position = WalkSorter.lowerBound(WalkKey(hash: item.hash, token: nil), in: sorted, slots: slots, tokens: tokens)
            var found = false
            while position < sorted.count && sorted[position].hash == item.hash {
                found = true
                if !inRange(position) {
                    if item.possiblySent || everythingSent {
                        sentFirst.append(sorted[position].member)
                        sentHashes.append(item.hash)
                    } else {
                        others.append(sorted[position].member)
                        otherHashes.append(item.hash)
                    }
                }
                position += 1
            }
            if !found { missing += 1 }
        }
        for (member, hash) in zip(sentFirst + others, sentHashes + otherHashes) {
            walk.members.append(member)
            walk.hashes.append(hash)
        }
        walk.explicitCount = walk.members.count
        walk.explicitPossiblySent = sentFirst.count
        walk.appendRange(sorted, from: rangeFirst, count: rangeCount)
        walk.rangePossiblySent = everythingSent ? rangeCount : rangeSent
        walk.from = checkpoint.rangeDone ? checkpoint.to : checkpoint.from
        walk.to = checkpoint.to
        walkSorter.releaseIfLarge()
        return (walk, missing)
    }

    // MARK: - Shutdown

    /// After the worker thread is gone (joined): starts queued waves, then ends every outcome still open as
    /// failed (Shutdown; held bad-token answers with their own reason, the tokens kept), so every wave
    /// completes and every targeted token is accounted for.
    func abandonAfterStop() {
        let now = monotonicNow()
        service(now: now, commandLimit: .max, workUntil: .max)
        failQueuedSingles()
        if heldTotal > 0 { releaseHeld(prune: false, resend: false, now: now) }
        endOpenOutcomes()
    }

    /// After the worker thread is gone, for a graceful shutdown of a durable engine: starts queued waves, fails
    /// queued single pushes, and returns every unfinished wave's progress (the waves stay unfinished: the next
    /// engine resumes them).
    func checkpointAfterStop() -> [WaveCheckpoint] {
        let now = monotonicNow()
        let writer = checkpoints
        checkpoints = nil  // nothing more goes to the writer: the engine writes what this returns
        service(now: now, commandLimit: .max, workUntil: .max)
        checkpoints = writer
        failQueuedSingles()
        var items: [WaveCheckpoint] = []
        let savedAt = Int64(time(nil)) * 1000
        for slot in waves.indices where waves[slot] != nil {
            items.append(
                WaveCheckpoint(waveID: waves[slot]!.update.wave.id, shard: index, data: progress(of: slot, final: true).encoded(), savedAt: savedAt))
        }
        return items
    }

    private func failQueuedSingles() {
        for index in nextReadySingle..<readySingles.count {
            let single = readySingles[index]
            single.completion(
                PushResult(
                    cookie: single.job.cookie, token: single.job.token, disposition: .failed(.shutdown),
                    apnsID: single.job.apnsID ?? PushIdentifier(), resends: 0, latencyNanoseconds: 0, worker: self.index))
        }
        readySingles.removeAll()
        nextReadySingle = 0
    }

    private func endOpenOutcomes() {
        let reason = FailureReason.shutdown
        for (channel, lane) in broadcastLanes where lane.waiting != 0 {
            let slot = lane.waiting - 1
            broadcastLanes[channel]!.waiting = 0
            broadcastsWaiting -= 1
            waves[slot]?.update.wave.broadcast?.finish(.failed, reason: reason)
            settle(slot)
        }
        for audienceIndex in audiences.indices {
            for member in audiences[audienceIndex].owed.indices {
                let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
                guard owedSlot >= 0 else { continue }
                audiences[audienceIndex].owed[member] = 0
                waves[owedSlot]!.tally.recordFailure(reason: reason)
                settle(owedSlot)
            }
            if audiences[audienceIndex].cursorActive { endCursor(audienceIndex) }
        }
        for slot in waves.indices {
            guard let wave = waves[slot] else { continue }
            assert(wave.outstanding >= wave.unvisited, "in-flight pushes remain after the client stopped")
            if wave.unvisited > 0 { wave.tally.recordFailure(reason: reason, count: wave.unvisited) }
            waves[slot]!.outstanding -= wave.unvisited
            waves[slot]!.unvisited = 0
            waves[slot]!.cursorDone = true
            settleIfDone(slot)
        }
    }

    // MARK: - Inspection (tests, statistics; shard thread or stopped)

    var memoryBytes: Int {
        tokens.bytesUsed + tokenIndex.bytesUsed + audiences.reduce(0) { $0 + $1.bytesUsed }
    }
}

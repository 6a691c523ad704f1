import FanfareClient
import FanfareCore
import Synchronization

/// One worker's share of the tokens, and the fan-out state that goes with them.
///
/// A token belongs to the shard `APNsClient.workerIndex(for:)` names, and the shard is that worker's
/// `PushProducer`: it runs on the worker's thread, hands pushes out as streams free up, and gets their
/// results on the same thread. So the token tables, budgets, cursors and counters below take no lock.
/// Other threads reach a shard only through `commands` (a bounded lock-free MPSC queue).
final class Shard: PushProducer, @unchecked Sendable {
    let index: Int
    let commands: BoundedMPSCQueue<ShardCommand>
    private let settings: ShardSettings
    private let standardBudget: PriorityBudget
    private let frequentBudget: PriorityBudget
    private unowned(unsafe) let invalidations: InvalidationSink

    // Tokens and channels (thread-confined after start).
    private(set) var tokens = TokenTable()
    private var tokenIndex = TokenIndex()
    private var channelSets = ChannelSets()
    private(set) var channelNames: [String] = []
    private var channelIDs: [String: Int] = [:]
    /// Two audiences per channel: `[2 * channel + kind]`.
    private(set) var audiences: [Audience] = []

    // Waves.
    private var waves: [ShardWave?] = []
    /// Keeps each running wave's update (and through it the wave and its tallies) alive; see `ShardWave`.
    private var waveOwners: [PublishedUpdate?] = []
    private var freeWaves: [Int] = []
    /// Increments at every wave start (see `TokenTable.registeredOrDiedAt`).
    private var epoch: UInt32 = 1
    /// Audiences with a running cursor, visited round-robin one push at a time.
    private var activeAudiences: [Int] = []
    private var nextActive = 0

    // Members waiting: lane 0 is "ready now", lane 1 the minimum interval, lanes 2... retry back-offs.
    private var lanes: [DueLane]
    private static let readyLane = 0
    private static let intervalLane = 1
    private static let firstRetryLane = 2

    /// Monotonic origin of the shard clock (deciseconds, offset so 0 means "never").
    private let clockOrigin: UInt64

    init(index: Int, settings: ShardSettings, commandCapacity: Int, invalidations: InvalidationSink) {
        self.index = index
        self.settings = settings
        standardBudget = PriorityBudget(settings.standardBudget)
        frequentBudget = PriorityBudget(settings.frequentBudget)
        commands = BoundedMPSCQueue(capacity: commandCapacity)
        self.invalidations = invalidations
        lanes = [DueLane(delay: 0), DueLane(delay: settings.minimumInterval)]
            + settings.retryDelays.map { DueLane(delay: $0) }
        clockOrigin = monotonicNow()
    }

    deinit {
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
        let set: UInt32
        if entry.channels.count == 1, let known = singleChannelSets[entry.channels[0]] {
            // Most tokens follow one channel: one lookup instead of channel ids, a sort and an intern.
            set = known
        } else {
            var channels: [UInt16] = []
            channels.reserveCapacity(entry.channels.count)
            for name in entry.channels { channels.append(UInt16(channelID(name))) }
            set = channelSets.intern(channels)
            if entry.channels.count == 1 { singleChannelSets[entry.channels[0]] = set }
        }
        var flags: TokenTable.Flags = []
        if entry.pushToStart { flags.insert(.pushToStart) }
        if entry.frequentUpdates { flags.insert(.frequentUpdates) }

        var carriedBudget: UInt32 = 0
        if let existing = tokenIndex.find(entry.token, in: tokens) {
            let slot = Int(existing)
            let sameShape = tokens.channelSet[slot] == set && tokens.flags[slot].contains(.pushToStart) == entry.pushToStart
            if sameShape {
                // Same channels and kind: refresh in place (the common re-registration).
                tokens.flags[slot] = flags.union(.alive)
                tokens.registeredOrDiedAt[slot] = entry.registeredAt
                return
            }
            // New channels or kind: retire the old slot (its memberships die with it), keep the budget.
            carriedBudget = tokens.budget[slot]
            remove(existing)
        }
        let slot = tokens.append(entry.token, flags: flags, registeredAt: entry.registeredAt, channelSet: set)
        tokens.budget[Int(slot)] = carriedBudget
        tokenIndex.insert(entry.token, slot: slot, in: tokens)
        let kind: Audience.Kind = entry.pushToStart ? .pushToStart : .update
        for channel in channelSets[set] {
            audiences[Self.audienceIndex(Int(channel), kind)].append(slot: slot)
        }
    }

    /// Channel name → interned set of just that channel.
    private var singleChannelSets: [String: UInt32] = [:]

    /// Reserves room before a bulk load.
    func reserve(tokens count: Int) {
        precondition(tokens.count == 0, "reserve before the first token")
        tokens.reserve(count, tokenBytes: 80)
        tokenIndex = TokenIndex(capacity: count)
    }

    private func channelID(_ name: String) -> Int {
        if let id = channelIDs[name] { return id }
        let id = channelNames.count
        precondition(id < 1 << 15, "more than 32767 channels in one shard")
        channelNames.append(name)
        channelIDs[name] = id
        audiences.append(Audience())
        audiences.append(Audience())
        return id
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
        tokens.kill(slot, epoch: epoch)
    }

    func unregister(_ token: DeviceToken) {
        if let slot = tokenIndex.find(token, in: tokens) { remove(slot) }
    }

    private func retireChannel(_ name: String) {
        guard let channel = channelIDs[name] else { return }
        let audience = audiences[Self.audienceIndex(channel, .update)]
        for member in audience.slots.indices where tokens.isAlive(audience.slots[member]) { remove(audience.slots[member]) }
    }

    // MARK: - Commands

    func service(now: UInt64) {
        service(now: now, commandLimit: settings.commandsPerTick)
    }

    private func service(now: UInt64, commandLimit: Int) {
        var budget = commandLimit
        while budget > 0, let command = commands.dequeue() {
            budget -= 1
            switch command {
            case .publish(let update): start(update)
            case .register(let batch): for entry in batch.entries { register(entry) }
            case .unregister(let batch): for token in batch.tokens { unregister(token) }
            case .retireChannel(let name): retireChannel(name)
            case .push(let single): readySingles.append(single)
            }
        }
    }

    // MARK: - Waves

    private func start(_ update: PublishedUpdate) {
        let tally = update.wave.tallies[index]
        let channel = channelID(update.channel)
        let audienceIndex = Self.audienceIndex(channel, update.kind)
        precondition(update.sequence > audiences[audienceIndex].lastSequence, "updates of a channel arrived out of order")
        audiences[audienceIndex].lastSequence = update.sequence

        // The running wave, if any, stops here: its unvisited members get only the newer state.
        var resume = 0
        if audiences[audienceIndex].cursorActive {
            let old = Int(audiences[audienceIndex].currentWave) - 1
            resume = audiences[audienceIndex].resumePosition
            let skipped = waves[old]!.unvisited
            waves[old]!.tally.superseded.add(skipped, ordering: .relaxed)
            waves[old]!.unvisited = 0
            waves[old]!.outstanding -= skipped
            waves[old]!.cursorDone = true
            endCursor(audienceIndex)
            settleIfDone(old)
        }
        // Dead members would only cost visits: drop them while nothing refers to members by index.
        let audienceDead = audiences[audienceIndex].count - audiences[audienceIndex].alive
        if audiences[audienceIndex].busy == 0 && audienceDead > max(64, audiences[audienceIndex].count / 8) {
            let table = tokens
            audiences[audienceIndex].compact(isAlive: { table.isAlive($0) })
            resume = 0
        }

        epoch &+= 1
        let targeted = audiences[audienceIndex].alive
        tally.targeted.store(targeted, ordering: .relaxed)
        let slot = allocateWaveSlot()
        waveOwners[slot] = update
        waves[slot] = ShardWave(
            update: update, tally: tally, channel: channel, kind: update.kind, epoch: epoch, outstanding: targeted,
            unvisited: targeted, cursorDone: targeted == 0)
        audiences[audienceIndex].currentWave = UInt16(slot + 1)
        if targeted > 0 {
            let count = audiences[audienceIndex].count
            audiences[audienceIndex].cursorActive = true
            audiences[audienceIndex].cursorCount = count
            audiences[audienceIndex].cursorStart = resume % count
            audiences[audienceIndex].visited = 0
            activeAudiences.append(audienceIndex)
        }
        settleIfDone(slot)
    }

    private func allocateWaveSlot() -> Int {
        if let slot = freeWaves.popLast() { return slot }
        precondition(waves.count < FanoutCookie.maximumWaves, "more than 32766 unfinished waves in one shard")
        waves.append(nil)
        waveOwners.append(nil)
        return waves.count - 1
    }

    private func endCursor(_ audienceIndex: Int) {
        audiences[audienceIndex].cursorActive = false
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
        if audiences[audienceIndex].currentWave == UInt16(slot + 1) {
            if audiences[audienceIndex].cursorActive { endCursor(audienceIndex) }
            audiences[audienceIndex].currentWave = 0
        }
        waves[slot] = nil
        freeWaves.append(slot)
        wave.update.wave.shardFinished(index)
        waveOwners[slot] = nil  // last: `wave`'s unowned references are used above
    }

    // MARK: - Producing pushes

    func poll(now: UInt64) -> ProducerPoll {
        if nextReadySingle < readySingles.count { return .push(sendSingle(now: now)) }
        // Members whose back-off or interval ended come first: they have waited longest.
        for lane in lanes.indices {
            while let raw = lanes[lane].popDue(now: now) {
                if let job = resumeWaiting(MemberRef(raw: raw), now: now) { return .push(job) }
            }
        }
        while !activeAudiences.isEmpty {
            if nextActive >= activeAudiences.count { nextActive = 0 }
            let audienceIndex = activeAudiences[nextActive]
            nextActive += 1
            if let job = visitNext(audienceIndex, now: now) { return .push(job) }
        }
        var wake = now &+ 1_000_000_000
        for lane in lanes { if let due = lane.nextDue { wake = min(wake, due) } }
        return .wait(until: wake)
    }

    /// Moves the cursor of one audience by one member; returns a push if that member gets one now.
    private func visitNext(_ audienceIndex: Int, now: UInt64) -> PushJob? {
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
            return nil
        }
        let count = audiences[audienceIndex].cursorCount
        let position = audiences[audienceIndex].cursorStart + audiences[audienceIndex].visited
        let member = position >= count ? position - count : position
        audiences[audienceIndex].visited += 1
        if audiences[audienceIndex].visited == count {
            waves[waveSlot]!.cursorDone = true
            endCursor(audienceIndex)
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        var job: PushJob?
        if !tokens.isAlive(tokenSlot) {
            // Targeted only if it died after this wave started.
            if tokens.registeredOrDiedAt[Int(tokenSlot)] >= wave.epoch {
                waves[waveSlot]!.unvisited -= 1
                WaveTally.bump(wave.tally.invalidated)
                settle(waveSlot)
            }
        } else {
            waves[waveSlot]!.unvisited -= 1
            job = deliver(waveSlot, to: member, of: audienceIndex, now: now)
        }
        if waves[waveSlot] != nil && waves[waveSlot]!.cursorDone { settleIfDone(waveSlot) }
        return job
    }

    /// The wave reached a live member: send now, or make it owed if the member is busy or too recent.
    private func deliver(_ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64) -> PushJob? {
        switch audiences[audienceIndex].states[member] {
        case .inFlight, .waiting:
            // It gets the newest state when its current push or back-off ends; an older owed state is dropped.
            let previous = Int(audiences[audienceIndex].owed[member]) - 1
            if previous >= 0 {
                WaveTally.bump(waves[previous]!.tally.superseded)
                settle(previous)
            }
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
            return nil
        case .idle:
            assert(audiences[audienceIndex].owed[member] == 0, "an idle member owes nothing")
            if heldByInterval(audiences[audienceIndex].slots[member], now: now) {
                audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
                park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
                return nil
            }
            return send(waveSlot, to: member, of: audienceIndex, now: now)
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
    private func resumeWaiting(_ ref: MemberRef, now: UInt64) -> PushJob? {
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        assert(audiences[audienceIndex].states[member] == .waiting)
        audiences[audienceIndex].states[member] = .idle
        audiences[audienceIndex].busy -= 1
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1
        guard owedSlot >= 0 else { return nil }
        let wave = waves[owedSlot]!
        if audiences[audienceIndex].currentWave != UInt16(owedSlot + 1) {
            // A newer wave exists and has not reached this member yet (else it would be owed that one):
            // the member gets only the newer state, from that wave's cursor.
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.superseded)
            settle(owedSlot)
            return nil
        }
        let tokenSlot = audiences[audienceIndex].slots[member]
        if !tokens.isAlive(tokenSlot) {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.invalidated)
            settle(owedSlot)
            return nil
        }
        if wave.update.deadline != 0 && now >= wave.update.deadline {
            audiences[audienceIndex].owed[member] = 0
            WaveTally.bump(wave.tally.expired)
            settle(owedSlot)
            return nil
        }
        if heldByInterval(tokenSlot, now: now) {
            park(member, of: audienceIndex, lane: Self.intervalLane, now: now)
            return nil
        }
        audiences[audienceIndex].owed[member] = 0
        return send(owedSlot, to: member, of: audienceIndex, now: now)
    }

    /// Builds the push: shared payload bytes, this token, the priority its budget allows.
    private func send(_ waveSlot: Int, to member: Int, of audienceIndex: Int, now: UInt64) -> PushJob {
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
        WaveTally.bump(wave.tally.sent)
        if audiences[audienceIndex].states[member] == .idle { audiences[audienceIndex].busy += 1 }
        audiences[audienceIndex].states[member] = .inFlight
        let ref = MemberRef(channel: audienceIndex >> 1, kind: audienceIndex & 1 == 0 ? .update : .pushToStart, member: member)
        return PushJob(
            token: tokens.token(UInt32(tokenSlot)), payload: update.payload, priority: priority,
            expiration: update.expiration, collapseID: update.collapseID, cookie: FanoutCookie.make(ref, wave: waveSlot))
    }

    // MARK: - Single pushes

    /// Single pushes queued by `service`, sent before wave members (FIFO; the array is reset when drained).
    private var readySingles: [SinglePush] = []
    private var nextReadySingle = 0
    /// Single pushes in flight, by the slot in their cookie.
    private var singlesInFlight: [SinglePush?] = []
    private var freeSingleSlots: [Int] = []

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
        if result.disposition.action == .dropToken, let tokenSlot = tokenIndex.find(result.token, in: tokens) {
            invalidate(tokenSlot, result: result)
        }
        var result = result
        result.cookie = single.job.cookie  // the caller's own
        single.completion(result)
    }

    // MARK: - Results

    /// On the worker thread: the push for one member of one wave (or a single push) ended.
    func pushCompleted(_ result: PushResult, now: UInt64) {
        let waveSlot = FanoutCookie.wave(result.cookie)
        if waveSlot == FanoutCookie.singlePush {
            singleCompleted(result)
            return
        }
        let ref = FanoutCookie.member(result.cookie)
        let audienceIndex = Self.audienceIndex(ref.channel, ref.kind)
        let member = ref.member
        assert(audiences[audienceIndex].states[member] == .inFlight, "a result for a member with nothing in flight")
        audiences[audienceIndex].states[member] = .idle
        audiences[audienceIndex].busy -= 1
        let tally = waves[waveSlot]!.tally
        let owedSlot = Int(audiences[audienceIndex].owed[member]) - 1

        if case .failed = result.disposition {} else { tally.recordAck(now: now) }
        switch result.disposition.action {
        case .delivered:
            WaveTally.bump(tally.delivered)
            audiences[audienceIndex].attempts[member] = 0
            settle(waveSlot)
        case .dropToken:
            WaveTally.bump(tally.invalidated)
            settle(waveSlot)
            invalidate(audiences[audienceIndex].slots[member], result: result)
            audiences[audienceIndex].attempts[member] = 0
            if owedSlot >= 0 {
                audiences[audienceIndex].owed[member] = 0
                WaveTally.bump(waves[owedSlot]!.tally.invalidated)
                settle(owedSlot)
            }
            return
        case .retryLater, .retryOnNewConnection, .refreshProviderToken:
            retry(waveSlot, member: member, of: audienceIndex, result: result, now: now)
            return
        case .fixConfiguration, .discardMessage:
            tally.recordFailure(reason: FailureReason.index(of: result.disposition))
            audiences[audienceIndex].attempts[member] = 0
            settle(waveSlot)
        }
        // A newer state arrived while this push was out: send it next.
        if owedSlot >= 0 { park(member, of: audienceIndex, lane: Self.readyLane, now: now) }
    }

    /// A transient failure: back off, then send the newest state (never a superseded one).
    private func retry(_ waveSlot: Int, member: Int, of audienceIndex: Int, result: PushResult, now: UInt64) {
        let reason = FailureReason.index(of: result.disposition)
        if case .failed(.shutdown) = result.disposition {
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
        let attempt = Int(audiences[audienceIndex].attempts[member]) + 1
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
        audiences[audienceIndex].attempts[member] = UInt8(attempt)
        if owedSlot >= 0 {
            // The retry carries the newer state; this wave's push is superseded for this member.
            WaveTally.bump(waves[waveSlot]!.tally.superseded)
            settle(waveSlot)
        } else {
            WaveTally.bump(waves[waveSlot]!.tally.retried)
            audiences[audienceIndex].owed[member] = UInt16(waveSlot + 1)
        }
        park(member, of: audienceIndex, lane: Self.firstRetryLane + attempt - 1, now: now)
    }

    private func invalidate(_ tokenSlot: UInt32, result: PushResult) {
        guard tokens.isAlive(tokenSlot) else { return }
        guard case .rejected(_, let reason, _, _, let timestamp) = result.disposition else { return }
        // A 410 older than the token's latest registration is stale news: the app registered it again since.
        if let timestamp, Int64(tokens.registeredOrDiedAt[Int(tokenSlot)]) * 1000 > timestamp { return }
        let token = tokens.token(tokenSlot)
        remove(tokenSlot)
        invalidations.tokenInvalidated(token, reason: reason, invalidSince: timestamp)
    }

    // MARK: - Shutdown

    /// After the worker thread is gone (joined): starts queued waves, then ends every outcome still open as
    /// failed (Shutdown), so every wave completes and every targeted token is accounted for.
    func abandonAfterStop() {
        service(now: monotonicNow(), commandLimit: .max)
        for index in nextReadySingle..<readySingles.count {
            let single = readySingles[index]
            single.completion(
                PushResult(
                    cookie: single.job.cookie, token: single.job.token, disposition: .failed(.shutdown),
                    apnsID: single.job.apnsID ?? PushIdentifier(), resends: 0, latencyNanoseconds: 0, worker: self.index))
        }
        readySingles.removeAll()
        nextReadySingle = 0
        let reason = FailureReason.shutdown
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

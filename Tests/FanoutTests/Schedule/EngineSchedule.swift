// A seeded random schedule over several real Shards behind the engine's routing, in the spirit of TigerBeetle's
// simulator. `ShardSchedule` checks one shard's state machine; this checks what the engine adds on top of it:
// - a token's registrations, removals and single pushes reach the shard `APNsClient.workerIndex` names, and a
//   result goes back to the shard that sent the push (`ResultRouter`);
// - one `Wave` has a tally per shard and completes once, when every shard's part did;
// - one invalid-token breaker for the engine: any shard may open it, every shard pauses its waves at its next
//   loop iteration, and the operator's close resumes them all;
// - each shard's lease ends on its own (lost, or run out on the clock) while the others keep sending;
// - shards take their queued commands at different moments (the seed picks whose loop runs, and some seeds
//   take a few commands per iteration), so one shard may still send a channel's older state while another
//   has the newer one already: each must send the newest state it has taken;
// - restarts: each unfinished wave resumes on every shard from that shard's checkpoint, or starts over when
//   the engine comes back with another number of shards (tokens then land on other shards).
// After every step it checks what must always hold; at the end it lets everything settle and checks that every
// wave accounted for every member it targeted. A whole run follows from its seed, and replays from it.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import Logging
import Synchronization

final class EngineSchedule: SeededSchedule {
    /// A push a shard handed out, not answered yet.
    private struct Outstanding {
        let shard: Int
        let job: PushJob
    }

    /// A member of one shard's audience (member references are per shard).
    private struct MemberKey: Hashable {
        let shard: Int
        let raw: UInt64
    }

    /// What a queued command tells its shard of a channel's newest state, kept until the shard takes it.
    private enum Queued {
        case state(channel: UInt16, timestamp: Int64)
        case other
    }

    /// What a run exercised, summed over seeds by the test (a schedule that never reaches a case checks nothing).
    struct Coverage {
        var wavePushes = 0
        /// Wave pushes that carried an older state than another shard had taken already (shards lagging).
        var lagging = 0
        var wavesCompleted = 0
        var breakerOpenings = 0
        var leasesLost = 0
        var restarts = 0
        var reshards = 0
        var singlePushes = 0
        var publishesRefused = 0

        static func + (a: Coverage, b: Coverage) -> Coverage {
            Coverage(
                wavePushes: a.wavePushes + b.wavePushes, lagging: a.lagging + b.lagging,
                wavesCompleted: a.wavesCompleted + b.wavesCompleted,
                breakerOpenings: a.breakerOpenings + b.breakerOpenings, leasesLost: a.leasesLost + b.leasesLost,
                restarts: a.restarts + b.restarts, reshards: a.reshards + b.reshards,
                singlePushes: a.singlePushes + b.singlePushes, publishesRefused: a.publishesRefused + b.publishesRefused
            )
        }

        var description: String {
            "\(wavePushes) wave pushes (\(lagging) from a shard behind another), \(wavesCompleted) waves completed, "
                + "breaker opened \(breakerOpenings) times, \(leasesLost) leases lost, \(restarts) restarts "
                + "(\(reshards) on another number of shards), \(singlePushes) single pushes, "
                + "\(publishesRefused) publishes refused for back-pressure"
        }
    }

    let seed: UInt64
    private(set) var coverage = Coverage()
    private var random: SeededRandom
    var log: ScheduleLog
    private let settings: ShardSettings
    private let breakerConfiguration: InvalidTokenBreakerConfiguration
    private let commandCapacity: Int
    /// Several nodes: each shard sends until its lease ends. A lone engine's shards send until `.max`.
    private let leased: Bool
    private let leaseLength: UInt64
    /// Some engines are pointed at the wrong APNs environment: many more bad-token answers (the breaker opens).
    private let badTokenPercent: Int
    private let invalidations = RecordingInvalidations()
    private var breaker: InvalidTokenBreaker
    private var shards: [Shard] = []
    /// Per shard, the commands queued and not taken yet (in the inbox's order) ...
    private var queued: [[Queued]] = []
    /// ... and each channel's newest state among those it took: the only state its wave pushes may carry.
    private var known: [[UInt16: Int64]] = []
    /// Per shard, the breaker's generation at its last loop iteration (odd: the shard paused its waves then).
    private var breakerSeen: [UInt64] = []
    /// The schedule's clock (monotonic ns); only steps move it.
    private var now: UInt64
    /// Channel `c<n>` has the engine's channel id n.
    private let channels: [String]
    /// Tokens the schedule may register (a pool, so removed tokens come back and re-registrations happen).
    private let pool: [DeviceToken]
    /// Registered tokens and their channels, as the registry would have them.
    private var registered: [DeviceToken: [String]] = [:]
    private var outstanding: [Outstanding] = []
    /// Members with a push out: a member never has two.
    private var membersOut: Set<MemberKey> = []
    /// The current object of every wave (a restart replaces it) ...
    private var waves: [Wave] = []
    /// ... and every object ever made, kept alive so that completion counts keyed by identity stay exact.
    private var everyWave: [Wave] = []
    private let completions = CompletionCount()
    /// What each wave was published as (a restart publishes the unfinished ones again, as the engine does).
    private var published: [UInt64: (ChannelUpdate, PublishedUpdate)] = [:]
    private var newestWave: [UInt16: UInt64] = [:]
    private var nextTimestamp: Int64 = 1_000
    private var nextWaveID: UInt64 = 1
    private var sequence: UInt64 = 0
    /// Single pushes taken, and how many answers each got (must end at exactly one).
    private var singleAnswers: [AnswerCount] = []
    private var openingsOfEarlierBreakers = 0

    init(seed: UInt64) {
        self.seed = seed
        log = ScheduleLog(schedule: "engine", seed: seed)
        var random = SeededRandom(seed: seed)
        var settings = ShardSettings(
            standardBudget: random.chance(30) ? PriorityBudgetProfile(perHour: 6, burst: 1) : .standard,
            frequentBudget: .frequent,
            minimumInterval: random.chance(30) ? UInt64(random.int(1...5)) * 100_000_000 : 0,
            retryDelays: (0..<random.int(1...3)).map { _ in UInt64(random.int(1...400)) * 1_000_000 })
        settings.retryUnconfirmed = random.chance(50)
        // Some engines take a few commands per loop iteration: their shards then lag each other by several.
        settings.commandsPerTick = random.chance(50) ? random.int(1...4) : 256
        self.settings = settings
        let breaker = InvalidTokenBreakerConfiguration.seeded(using: &random)
        breakerConfiguration = breaker
        commandCapacity = random.pick([4, 16, 64])
        badTokenPercent = random.chance(30) ? random.int(10...60) : 0
        leased = random.chance(50)
        leaseLength = UInt64(random.int(200...3_000)) * 1_000_000
        channels = (0..<random.int(1...3)).map { "c\($0)" }
        pool = (0..<random.int(8...64)).map { makeToken($0, salt: seed, byteCount: 80) }
        self.breaker = Self.makeBreaker(breaker)
        now = monotonicNow()
        let shardCount = random.int(1...4)
        self.random = random
        startShards(count: shardCount)
        churnTokens(pool, registering: 80)
    }

    // MARK: - Steps

    func takeStep() {
        let shard = random.int(0...shards.count - 1)
        switch random.weighted([12, 20, 22, 24, 3, 10, 5, leased ? 4 : 0, 3, 3, 1]) {
        case 0: publish()
        case 1: service(shard)
        case 2: poll(shard, streams: random.int(1...12))
        case 3: answerSome()
        case 4: goAway(shard)
        case 5: advance(milliseconds: random.pick([1, 5, 50, 120, 500, 2_000]))
        case 6: churnTokens(somePoolTokens(), registering: 50)
        case 7: changeLease(shard)
        case 8: closeBreaker(prune: random.chance(50))
        case 9: pushSingle()
        default: restart(graceful: random.chance(60))
        }
    }

    /// `FanoutEngine.publish`: every shard has room for the command or the publish is refused (back-pressure);
    /// then one wave, with a tally per shard, goes to every shard's inbox.
    private func publish() {
        if let full = shards.firstIndex(where: { !$0.inbox.hasControlRoom }) {
            coverage.publishesRefused += 1
            note("publish refused: shard \(full)'s inbox is full (back-pressure)")
            return
        }
        let channel = UInt16(random.int(0...channels.count - 1))
        nextTimestamp += Int64(random.int(1...3))
        let alert = random.chance(40)
        let priority = random.pick([UpdatePriority.auto, .auto, .immediate, .normal])
        // Some updates are worth showing only briefly: the rest of such a wave expires unsent.
        let deadline = random.chance(15) ? now &+ UInt64(random.int(10...3_000)) * 1_000_000 : 0
        do {
            let update = try ShardDriver.channelUpdate(
                channel: channels[Int(channel)], timestamp: nextTimestamp, alert: alert, priority: priority)
            let wave = makeWave(id: nextWaveID, update: update, publishedAt: now)
            nextWaveID += 1
            sequence += 1
            let shardUpdate = PublishedUpdate(
                wave: wave, update: update, channel: channel, sequence: sequence,
                payload: try PushPayload(liveActivity: update.content), deadline: deadline)
            for index in shards.indices {
                enqueue(.publish(shardUpdate), on: index, .state(channel: channel, timestamp: nextTimestamp))
            }
            waves.append(wave)
            published[wave.id] = (update, shardUpdate)
            newestWave[channel] = wave.id
            note("publish wave \(wave.id) c\(channel) t=\(nextTimestamp) \(priority) deadline=\(deadline != 0)")
        } catch {
            fail("publish failed: \(error)")
        }
    }

    /// One loop iteration of a shard's worker: its single pushes, then control commands within its budget.
    private func service(_ index: Int) {
        let shard = shards[index]
        let before = shard.inbox.controlCount
        // No time budget (`.max`): how many commands a loop takes must follow from the seed, not the machine.
        shard.service(now: now, commandLimit: settings.commandsPerTick, workUntil: .max)
        took(before - shard.inbox.controlCount, on: index)
        breakerSeen[index] = breaker.generation.load(ordering: .relaxed)
        note("shard \(index) loop: took \(before - shard.inbox.controlCount) commands")
    }

    /// The shard took its `count` oldest queued commands: what they said of channels' states is its now.
    private func took(_ count: Int, on index: Int) {
        for item in queued[index].prefix(count) {
            if case .state(let channel, let timestamp) = item {
                known[index][channel] = max(known[index][channel] ?? .min, timestamp)
            }
        }
        queued[index].removeFirst(count)
    }

    private func poll(_ index: Int, streams: Int) {
        var produced = 0
        while produced < streams, case .push(let job) = shards[index].poll(now: now) {
            produced += 1
            accept(job, from: index)
        }
        note("shard \(index) poll \(streams) streams: \(produced) pushes")
    }

    /// A push a shard handed out: check it against the rules, then keep it until it is answered.
    private func accept(_ job: PushJob, from index: Int) {
        let routed = APNsClient.workerIndex(for: job.token, workerCount: shards.count)
        if routed != index { fail("shard \(index) sent to a token that routes to shard \(routed)") }
        outstanding.append(Outstanding(shard: index, job: job))
        let cookie = job.cookie
        guard !FanoutCookie.isBroadcast(cookie) && FanoutCookie.wave(cookie) != FanoutCookie.singlePush else { return }
        let member = FanoutCookie.member(cookie)
        let sendUntil = shards[index].sendUntil.load(ordering: .relaxed)
        if now >= sendUntil {
            fail("shard \(index) sent a wave push \(now &- sendUntil) ns after its lease ended")
        }
        let generation = breaker.generation.load(ordering: .relaxed)
        if generation & 1 == 1 && breakerSeen[index] == generation {
            fail("shard \(index) sent a wave push with the breaker open since its last loop iteration")
        }
        if !membersOut.insert(MemberKey(shard: index, raw: member.raw)).inserted {
            fail(
                "shard \(index): member \(member.member) of channel \(member.channel) got a second push while one "
                    + "is out"
            )
        }
        let carried = payloadTimestamp(job)
        let newest = known[index][UInt16(member.channel)] ?? -1
        coverage.wavePushes += 1
        if known.contains(where: { ($0[UInt16(member.channel)] ?? -1) > carried }) { coverage.lagging += 1 }
        if carried != newest {
            fail(
                "shard \(index) sent state t=\(carried) of channel \(member.channel); the newest it took is t=\(newest)"
            )
        }
    }

    private func answerSome() {
        guard !outstanding.isEmpty else { return }
        for _ in 0..<random.int(1...min(8, outstanding.count)) {
            answer(
                outstanding.remove(at: random.int(0...outstanding.count - 1)),
                random.apnsAnswer(badTokenPercent: badTokenPercent))
        }
    }

    /// One shard's connection went away: some of the streams it had sent end unconfirmed.
    private func goAway(_ index: Int) {
        let positions = outstanding.indices.filter { outstanding[$0].shard == index }
        let count = random.int(0...positions.count)
        for position in positions.prefix(count).reversed() {
            answer(outstanding.remove(at: position), .failed(.unconfirmed(cause: "GOAWAY")))
        }
        note("shard \(index) GOAWAY: \(count) streams unconfirmed")
    }

    /// As `ResultRouter`: the result goes to the shard of the worker that sent the push.
    private func answer(_ item: Outstanding, _ disposition: PushDisposition) {
        let cookie = item.job.cookie
        if !FanoutCookie.isBroadcast(cookie) && FanoutCookie.wave(cookie) != FanoutCookie.singlePush {
            membersOut.remove(MemberKey(shard: item.shard, raw: FanoutCookie.member(cookie).raw))
        }
        note("shard \(item.shard) answer \(disposition)")
        let result = PushResult(
            cookie: cookie, token: item.job.token, disposition: disposition, apnsID: PushIdentifier(), resends: 0,
            latencyNanoseconds: 0, worker: item.shard)
        shards[result.worker].pushCompleted(result, now: now)
    }

    private func advance(milliseconds: Int) {
        now &+= UInt64(milliseconds) * 1_000_000
        note("advance \(milliseconds) ms")
    }

    /// One to four tokens of the pool, all different.
    private func somePoolTokens() -> [DeviceToken] {
        let first = random.int(0...pool.count - 1)
        return (0..<random.int(1...4)).map { pool[(first + $0) % pool.count] }
    }

    /// Registers or removes `tokens` in one call, as `FanoutEngine.register` / `unregister`: one batch per
    /// shard, each token to the shard its hash names.
    private func churnTokens(_ tokens: [DeviceToken], registering percent: Int) {
        var registrations = Array(repeating: [RegistrationBatch.Entry](), count: shards.count)
        var removals = Array(repeating: [DeviceToken](), count: shards.count)
        for token in tokens {
            let index = APNsClient.workerIndex(for: token, workerCount: shards.count)
            if registered[token] != nil && !random.chance(percent) {
                registered[token] = nil
                removals[index].append(token)
            } else if registered[token] != nil || random.chance(percent) {
                var chosen = channels.filter { _ in random.chance(50) }
                if chosen.isEmpty { chosen = [random.pick(channels)] }
                registered[token] = chosen
                registrations[index].append(entry(token, chosen, frequent: random.chance(20)))
            }
        }
        for index in shards.indices {
            if !registrations[index].isEmpty { enqueue(.register(RegistrationBatch(registrations[index])), on: index) }
            if !removals[index].isEmpty { enqueue(.unregister(TokenBatch(removals[index])), on: index) }
        }
        note("registered \(registrations.map(\.count)), removed \(removals.map(\.count)) per shard")
    }

    private func entry(_ token: DeviceToken, _ channels: [String], frequent: Bool) -> RegistrationBatch.Entry {
        RegistrationBatch.Entry(
            token: token, pushToStart: false, frequentUpdates: frequent, registeredAtSeconds: 1_700_000_000,
            channels: channels.map { name in self.channels.firstIndex(of: name).map { UInt16($0) } ?? 0 })
    }

    /// One shard's lease, as the node's coordinator moves it: renewed (`extendLease`), lost (`dropShard`: at
    /// once), or renewed late (it runs out on the clock soon unless renewed again).
    private func changeLease(_ index: Int) {
        let shard = shards[index]
        switch random.weighted([60, 20, 20]) {
        case 0:
            shard.sendUntil.store(now &+ leaseLength, ordering: .relaxed)
            note("shard \(index) lease renewed")
        case 1:
            shard.sendUntil.store(0, ordering: .relaxed)
            coverage.leasesLost += 1
            note("shard \(index) lease lost")
        default:
            shard.sendUntil.store(now &+ UInt64(random.int(1...200)) * 1_000_000, ordering: .relaxed)
            note("shard \(index) lease renewed late")
        }
    }

    /// `FanoutEngine.resetBreaker`: closes it, then every shard settles what it holds and its waves go on.
    private func closeBreaker(prune: Bool) {
        guard breaker.close(pruneHeldTokens: prune) else { return }
        for index in shards.indices { enqueue(.resumeAfterBreaker(pruneHeldTokens: prune), on: index) }
        note("breaker closed, prune=\(prune)")
    }

    /// `FanoutEngine.push`: through the token's shard's own queue; a full queue refuses it (back-pressure).
    private func pushSingle() {
        let token = random.pick(pool)
        let index = APNsClient.workerIndex(for: token, workerCount: shards.count)
        guard let payload = try? PushPayload(#"{"aps":{"timestamp":1}}"#) else {
            fail("the single push's payload does not encode")
            return
        }
        let answers = AnswerCount()
        let job = PushJob(token: token, payload: payload, priority: .immediate)
        if shards[index].inbox.enqueueSingle(SinglePush(job: job) { _ in answers.value.add(1, ordering: .relaxed) }) {
            singleAnswers.append(answers)
            coverage.singlePushes += 1
            note("single push through shard \(index)")
        } else {
            note("single push refused: shard \(index)'s queue is full (back-pressure)")
        }
    }

    // MARK: - The engine's parts

    /// How many times `breaker` opened (its generation goes up by one at each opening and each closing).
    private static func openings(of breaker: InvalidTokenBreaker) -> Int {
        Int((breaker.generation.load(ordering: .relaxed) + 1) / 2)
    }

    private static func makeBreaker(_ configuration: InvalidTokenBreakerConfiguration) -> InvalidTokenBreaker {
        var logger = Logger(label: "test.engine-schedule")
        logger.logLevel = .critical  // thousands of openings: their log lines would say nothing here
        return InvalidTokenBreaker(configuration: configuration, logger: logger)
    }

    private func startShards(count: Int) {
        shards = (0..<count).map { index in
            Shard(
                index: index, settings: settings, commandCapacity: commandCapacity, invalidations: invalidations,
                breaker: breaker, clockOrigin: now)
        }
        queued = Array(repeating: [], count: count)
        known = Array(repeating: [:], count: count)
        breakerSeen = Array(repeating: 0, count: count)
        for shard in shards { shard.sendUntil.store(leased ? now &+ leaseLength : .max, ordering: .relaxed) }
    }

    private func makeWave(
        id: UInt64, update: ChannelUpdate, publishedAt: UInt64, restarts: Int = 0,
        participating: [Int]? = nil
    ) -> Wave {
        let completions = completions
        let wave = Wave(
            id: id, update: update, shardCount: shards.count, publishedAt: publishedAt, breaker: breaker,
            restarts: restarts, participating: participating, onComplete: { completions.record($0) })
        everyWave.append(wave)
        return wave
    }

    /// As the engine's `enqueueWaiting`: durable work must reach the shard, so a full inbox waits for the
    /// shard's worker to take some (here: its loop runs).
    private func enqueue(_ command: ShardCommand, on index: Int, _ mirror: Queued = .other) {
        while !shards[index].inbox.hasControlRoom { service(index) }
        shards[index].inbox.enqueueControl(command)
        queued[index].append(mirror)
    }

    // MARK: - Restarts

    /// The engine stops and another starts on the same registry and wave store, with as many shards or (now and
    /// then) another number. Graceful: what is out ends (answered, or failed by the shutdown) and every shard's
    /// progress is saved. A crash: nothing is saved, answers never come. The new engine resumes each unfinished
    /// wave as `FanoutEngine.resume` decides (its channel's newest resumes, older ones end superseded, one past
    /// its deadline ends expired), on every shard from that shard's checkpoint; on another number of shards
    /// everything starts over. A shard whose part had finished keeps it: the store has its final checkpoint
    /// (after a crash only if it was written in time), so the resumed wave leaves that shard out, as a node
    /// that takes some shards does (`participating`).
    private func restart(graceful: Bool) {
        var checkpoints: [UInt64: [Int: ShardCheckpoint]] = [:]
        if graceful {
            for item in outstanding { answer(item, random.chance(50) ? .delivered : .failed(.shutdown)) }
            outstanding.removeAll()
            for (index, shard) in shards.enumerated() {
                for item in shard.checkpointAfterStop(now: now) {
                    do {
                        checkpoints[item.waveID, default: [:]][index] = try ShardCheckpoint(decoding: item.data)
                    } catch {
                        fail("wave \(item.waveID)'s checkpoint of shard \(index) does not decode: \(error)")
                    }
                }
            }
        } else {
            // The process died with its callers: their single pushes are owed nothing any more.
            singleAnswers.removeAll { $0.value.load(ordering: .relaxed) == 0 }
        }
        outstanding.removeAll()
        membersOut.removeAll()
        let finalsKept = graceful || random.chance(50)
        let count = random.chance(25) ? random.int(1...4) : shards.count
        let sameShards = count == shards.count
        coverage.restarts += 1
        if !sameShards { coverage.reshards += 1 }
        openingsOfEarlierBreakers += Self.openings(of: breaker)
        breaker = Self.makeBreaker(breakerConfiguration)
        startShards(count: count)
        loadRegistry()
        for (position, wave) in waves.enumerated() where !wave.isComplete {
            let finished =
                sameShards && finalsKept
                ? wave.tallies.indices.filter { wave.tallies[$0].finished.load(ordering: .relaxed) } : []
            waves[position] = resume(
                wave, checkpoints: sameShards ? checkpoints[wave.id] ?? [:] : [:], skipping: finished)
        }
        note("\(graceful ? "graceful restart" : "crash and restart") on \(count) shards")
    }

    /// The new engine's shards load the registry's tokens, each in the shard its hash names now.
    private func loadRegistry() {
        var perShard = Array(repeating: [RegistrationBatch.Entry](), count: shards.count)
        // In the pool's order, not the dictionary's (which changes from run to run): a seed replays exactly.
        for token in pool {
            guard let names = registered[token] else { continue }
            perShard[APNsClient.workerIndex(for: token, workerCount: shards.count)]
                .append(entry(token, names, frequent: false))
        }
        for (index, entries) in perShard.enumerated() where !entries.isEmpty {
            enqueue(.register(RegistrationBatch(entries)), on: index)
        }
    }

    /// `FanoutEngine.enqueueResumed`: the wave again, with a tally per shard, to every shard that has a part.
    private func resume(_ wave: Wave, checkpoints: [Int: ShardCheckpoint], skipping finished: [Int]) -> Wave {
        guard let (update, old) = published[wave.id] else {
            fail("wave \(wave.id) has no published update")
            return wave
        }
        var mode = Shard.ResumeMode.resume
        if newestWave[old.channel] != wave.id {
            mode = .supersede
        } else if old.deadline != 0 && old.deadline <= now {
            mode = .expire
        }
        let taking = shards.indices.filter { !finished.contains($0) }
        let resumed = makeWave(
            id: wave.id, update: update, publishedAt: wave.publishedAt, restarts: wave.restarts + 1,
            participating: finished.isEmpty ? nil : taking)
        sequence += 1
        let again = PublishedUpdate(
            wave: resumed, update: update, channel: old.channel, sequence: sequence, payload: old.payload,
            deadline: old.deadline)
        again.hasAlert = old.hasAlert
        for index in taking {
            enqueue(
                .resumeWave(ResumedWave(update: again, checkpoint: checkpoints[index], mode: mode)), on: index,
                .state(channel: old.channel, timestamp: wave.timestamp))
        }
        published[wave.id] = (update, again)
        return resumed
    }

    // MARK: - Rules

    /// What holds after every step.
    func check() {
        for (index, shard) in shards.enumerated() {
            for (audienceIndex, audience) in shard.audiences.enumerated() where audience.busy != audience.countedBusy {
                fail(
                    "shard \(index) audience \(audienceIndex): busy \(audience.busy), but \(audience.countedBusy) "
                        + "are not idle"
                )
            }
        }
        for wave in waves { check(wave) }
    }

    /// A wave's parts and the wave agree: no part has more outcomes than members it targeted, a finished part
    /// has exactly one per member, and the wave is complete (once) exactly when every part is finished.
    private func check(_ wave: Wave) {
        var unfinished: [Int] = []
        for (index, tally) in wave.tallies.enumerated() {
            let targeted = tally.targeted.load(ordering: .relaxed)
            let accounted = Self.accounted(tally)
            if accounted > targeted {
                fail("wave \(wave.id), shard \(index): \(accounted) outcomes for \(targeted) targeted members")
            }
            if !tally.finished.load(ordering: .relaxed) {
                unfinished.append(index)
            } else if accounted != targeted {
                fail(
                    "wave \(wave.id), shard \(index) finished its part with \(accounted) outcomes for \(targeted) "
                        + "members"
                )
            }
        }
        if wave.isComplete != unfinished.isEmpty {
            fail("wave \(wave.id): complete \(wave.isComplete), but shards \(unfinished) have not finished their parts")
        }
        let reported = completions.count(of: wave)
        if reported != (wave.isComplete ? 1 : 0) {
            fail("wave \(wave.id) (complete \(wave.isComplete)) told the engine it completed \(reported) times")
        }
    }

    private static func accounted(_ tally: WaveTally) -> Int {
        tally.delivered.load(ordering: .relaxed) + tally.failed.load(ordering: .relaxed)
            + tally.superseded.load(ordering: .relaxed) + tally.expired.load(ordering: .relaxed)
            + tally.invalidated.load(ordering: .relaxed)
    }

    /// Every lease returns, the breaker closes, and APNs answers everything 200 until nothing is left.
    func settle() {
        for shard in shards { shard.sendUntil.store(.max, ordering: .relaxed) }
        for _ in 0..<10_000 {
            closeBreaker(prune: false)
            advance(milliseconds: 100)
            for index in shards.indices {
                service(index)
                poll(index, streams: 64)
            }
            let answering = outstanding
            outstanding.removeAll()
            for item in answering { answer(item, .delivered) }
            check()
            if log.failure != nil { return }
            if outstanding.isEmpty && waves.allSatisfy(\.isComplete) && queued.allSatisfy(\.isEmpty) { break }
        }
        for wave in waves where !wave.isComplete {
            let report = wave.report
            fail("wave \(wave.id) never completed: \(report.accounted) of \(report.targeted) accounted; \(shardStates)")
        }
        for (index, shard) in shards.enumerated() {
            for (audienceIndex, audience) in shard.audiences.enumerated() where audience.busy != 0 {
                fail("shard \(index) audience \(audienceIndex): \(audience.busy) members still busy at the end")
            }
        }
        coverage.wavesCompleted = completions.total
        coverage.breakerOpenings = openingsOfEarlierBreakers + Self.openings(of: breaker)
        for (index, answers) in singleAnswers.enumerated() where answers.value.load(ordering: .relaxed) != 1 {
            fail("single push \(index) got \(answers.value.load(ordering: .relaxed)) answers")
        }
    }

    // MARK: - Reporting

    /// What the shards hold, for a failure's message.
    private var shardStates: String {
        shards.map { shard in
            "shard \(shard.index): paused \(shard.paused), held \(shard.window.heldCount), pushes out "
                + "\(shard.pushesOut), results back \(shard.resultsBack), lanes \(shard.lanes.map(\.count)), "
                + "active audiences \(shard.activeAudiences.count), queued \(shard.inbox.controlCount)"
        }.joined(separator: "; ") + "; breaker open \(breaker.isOpen)"
    }

    private func note(_ text: String) { log.note(text) }

    private func fail(_ what: String) { log.fail(what) }
}

/// How many times each wave object told the engine it completed (`onComplete`, on the shard's thread: here the
/// test's own).
final class CompletionCount: Sendable {
    private let counts = Mutex<[ObjectIdentifier: Int]>([:])

    func record(_ wave: Wave) { counts.withLock { $0[ObjectIdentifier(wave), default: 0] += 1 } }

    func count(of wave: Wave) -> Int { counts.withLock { $0[ObjectIdentifier(wave)] ?? 0 } }

    var total: Int { counts.withLock { $0.values.reduce(0, +) } }
}

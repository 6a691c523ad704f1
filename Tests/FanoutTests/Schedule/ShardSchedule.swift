// A seeded random schedule over one real Shard, in the spirit of TigerBeetle's simulator: the schedule plays the
// engine (publishes, registrations, lease changes, the operator closing the breaker), the worker (polls with a
// random number of free streams) and APNs (answers in any order: 200, 410, bad tokens, 429, 5xx, no answer, a
// GOAWAY's unconfirmed streams), on a clock it moves itself. After every step it checks what must always hold;
// at the end it lets everything settle and checks that every wave accounted for every member it targeted.
// A whole run follows from its seed: a failure names the seed and its last steps, and replays from it.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import Synchronization

final class ShardSchedule: SeededSchedule {
    let seed: UInt64
    private var random: SeededRandom
    private var driver: ShardDriver
    /// Builds the driver again for a restart, with the seed's settings.
    private let makeDriver: (_ startingAt: UInt64?) -> ShardDriver
    private let channels: [String]
    /// Tokens the schedule may register (a pool, so removed tokens come back and re-registrations happen).
    private let pool: [DeviceToken]
    /// Registered tokens and their channels, as the registry would have them.
    private var registered: [DeviceToken: [String]] = [:]
    /// Pushes handed out and not answered yet.
    private var outstanding: [PushJob] = []
    /// The members (wave pushes) among them: a member never has two pushes out.
    private var membersOut: Set<UInt64> = []
    private var waves: [Wave] = []
    /// What each wave was published as (a restart publishes the unfinished ones again, as the engine does).
    private var published: [UInt64: (ChannelUpdate, PublishedUpdate)] = [:]
    /// The newest wave of each channel.
    private var newestWave: [UInt16: UInt64] = [:]
    /// Each channel's newest published timestamp: the only state a wave push may carry when it goes out.
    private var newest: [UInt16: Int64] = [:]
    private var nextTimestamp: Int64 = 1_000
    private var leaseHeld = true
    /// Single pushes sent, and how many answers each got (must end at exactly one).
    private var singleAnswers: [AnswerCount] = []
    var log: ScheduleLog

    init(seed: UInt64) {
        self.seed = seed
        log = ScheduleLog(schedule: "shard", seed: seed)
        var random = SeededRandom(seed: seed)
        let retries = random.int(1...3)
        let breaker = InvalidTokenBreakerConfiguration.seeded(using: &random)
        let minimumInterval = random.chance(30) ? UInt64(random.int(1...5)) * 100_000_000 : 0
        let retryDelays = (0..<retries).map { _ in UInt64(random.int(1...400)) * 1_000_000 }
        let standard = random.chance(30) ? PriorityBudgetProfile(perHour: 6, burst: 1) : .standard
        let retryUnconfirmed = random.chance(50)
        makeDriver = { start in
            ShardDriver(
                minimumInterval: minimumInterval, retryDelays: retryDelays, standard: standard, breaker: breaker,
                retryUnconfirmed: retryUnconfirmed, startingAt: start)
        }
        driver = makeDriver(nil)
        channels = (0..<random.int(1...3)).map { "c\($0)" }
        for channel in channels { _ = driver.channelID(channel) }  // ids in order: c0 = 0, c1 = 1, ...
        pool = (0..<random.int(4...48)).map { makeToken($0, salt: seed, byteCount: 80) }
        self.random = random
        for token in pool where random.chance(80) { register(token) }
    }

    // MARK: - Steps

    func takeStep() {
        switch random.weighted([14, 26, 30, 3, 12, 6, 3, 3, 3, 1]) {
        case 0: publish()
        case 1: poll(streams: random.int(1...12))
        case 2: answerSome()
        case 3: goAway()
        case 4: advance(milliseconds: random.pick([1, 5, 50, 120, 500, 2_000]))
        case 5: churnTokens()
        case 6: toggleLease()
        case 7: closeBreaker()
        case 8: pushSingle()
        default: restart(graceful: random.chance(60))
        }
    }

    private func publish() {
        let channel = random.pick(channels)
        nextTimestamp += Int64(random.int(1...3))
        let alert = random.chance(40)
        let priority = random.pick([UpdatePriority.auto, .auto, .immediate, .normal])
        // Some updates are worth showing only briefly: the rest of such a wave expires unsent.
        let deadline = random.chance(15) ? driver.now &+ UInt64(random.int(10...3_000)) * 1_000_000 : 0
        do {
            let channelUpdate = try driver.channelUpdate(
                channel: channel, timestamp: nextTimestamp, alert: alert, priority: priority)
            let (update, wave) = try driver.update(channelUpdate, deadline: deadline)
            driver.send(.publish(update))
            waves.append(wave)
            published[wave.id] = (channelUpdate, update)
            newest[update.channel] = nextTimestamp
            newestWave[update.channel] = wave.id
            note("publish \(channel) t=\(nextTimestamp) \(priority) alert=\(alert) deadline=\(deadline != 0)")
        } catch {
            fail("publish failed: \(error)")
        }
    }

    private func poll(streams: Int) {
        var produced = 0
        while produced < streams, case .push(let job) = driver.shard.poll(now: driver.now) {
            produced += 1
            accept(job)
        }
        note("poll \(streams) streams: \(produced) pushes")
    }

    /// A push the shard handed out: check it against the rules, then keep it until it is answered.
    private func accept(_ job: PushJob) {
        let cookie = job.cookie
        let waveSlot = FanoutCookie.wave(cookie)
        if !FanoutCookie.isBroadcast(cookie) && waveSlot != FanoutCookie.singlePush {
            let member = FanoutCookie.member(cookie)
            if !leaseHeld { fail("a wave push went out after the lease was lost: \(job.token)") }
            if !membersOut.insert(member.raw).inserted {
                fail("member \(member.member) of channel \(member.channel) got a second push while one is out")
            }
            let carried = payloadTimestamp(job)
            let latest = newest[UInt16(member.channel)] ?? -1
            if carried != latest {
                fail("a push carried state t=\(carried) of channel \(member.channel) whose newest is t=\(latest)")
            }
        }
        outstanding.append(job)
    }

    private func answerSome() {
        guard !outstanding.isEmpty else { return }
        for _ in 0..<random.int(1...min(8, outstanding.count)) {
            let job = outstanding.remove(at: random.int(0...outstanding.count - 1))
            answer(job, random.apnsAnswer())
        }
    }

    /// The connection went away: the streams it had sent end unconfirmed (APNs may have them); the client would
    /// resend the others itself, which the shard never sees.
    private func goAway() {
        let count = random.int(0...outstanding.count)
        for _ in 0..<count {
            let job = outstanding.remove(at: random.int(0...outstanding.count - 1))
            answer(job, .failed(.unconfirmed(cause: "GOAWAY")))
        }
        note("GOAWAY: \(count) streams unconfirmed")
    }

    private func answer(_ job: PushJob, _ disposition: PushDisposition) {
        let cookie = job.cookie
        if !FanoutCookie.isBroadcast(cookie) && FanoutCookie.wave(cookie) != FanoutCookie.singlePush {
            membersOut.remove(FanoutCookie.member(cookie).raw)
        }
        note("answer \(disposition)")
        driver.answer(job, disposition)
    }

    private func advance(milliseconds: Int) {
        driver.now &+= UInt64(milliseconds) * 1_000_000
        // The worker's loop iteration: commands, the breaker's generation, checkpoints.
        driver.shard.service(now: driver.now)
        note("advance \(milliseconds) ms")
    }

    private func churnTokens() {
        let token = random.pick(pool)
        if registered[token] != nil && random.chance(50) {
            registered[token] = nil
            driver.send(.unregister(TokenBatch([token])))
            note("unregister a token")
        } else {
            register(token)
            note("register a token")
        }
    }

    private func register(_ token: DeviceToken) {
        var chosen = channels.filter { _ in random.chance(50) }
        if chosen.isEmpty { chosen = [random.pick(channels)] }
        registered[token] = chosen
        driver.send(
            .register(
                RegistrationBatch([
                    RegistrationBatch.Entry(
                        token: token, pushToStart: false, frequentUpdates: random.chance(20),
                        registeredAtSeconds: 1_700_000_000,
                        channels: chosen.map { driver.channelID($0) })
                ])))
    }

    private func toggleLease() {
        leaseHeld.toggle()
        driver.shard.sendUntil.store(leaseHeld ? .max : driver.now, ordering: .relaxed)
        note(leaseHeld ? "lease regained" : "lease lost")
    }

    private func closeBreaker() {
        guard driver.breaker.isOpen else { return }
        let prune = random.chance(50)
        _ = driver.breaker.close(pruneHeldTokens: prune)
        driver.send(.resumeAfterBreaker(pruneHeldTokens: prune))
        note("breaker closed, prune=\(prune)")
    }

    private func pushSingle() {
        let token = random.pick(pool)
        let answers = AnswerCount()
        singleAnswers.append(answers)
        let job = PushJob(token: token, payload: try! PushPayload(#"{"aps":{"timestamp":1}}"#), priority: .immediate)
        driver.send(SinglePush(job: job) { _ in answers.value.add(1, ordering: .relaxed) })
        note("single push")
    }

    /// The engine stops and another starts on the same registry. Graceful: what is out ends (answered, or failed
    /// by the shutdown), the shard's progress is saved, and the next shard resumes each unfinished wave from it.
    /// A crash: answers never come and nothing is saved (no checkpoint writer here), so each unfinished wave
    /// starts over on the next shard, every member counted as possibly sent. Either way the newest wave of a
    /// channel resumes and older ones end superseded, as `FanoutEngine.resume` decides.
    private func restart(graceful: Bool) {
        var checkpoints: [UInt64: ShardCheckpoint] = [:]
        if graceful {
            for job in outstanding { answer(job, random.chance(50) ? .delivered : .failed(.shutdown)) }
            outstanding.removeAll()
            for item in driver.shard.checkpointAfterStop(now: driver.now) {
                do { checkpoints[item.waveID] = try ShardCheckpoint(decoding: item.data) } catch {
                    fail("wave \(item.waveID)'s checkpoint does not decode: \(error)")
                }
            }
        }
        if !graceful {
            // The process died with its callers: their single pushes are owed nothing any more.
            singleAnswers.removeAll { $0.value.load(ordering: .relaxed) == 0 }
        }
        outstanding.removeAll()
        membersOut.removeAll()
        let stopped = driver
        driver = makeDriver(stopped.now)
        driver.carryOver(from: stopped)
        driver.shard.sendUntil.store(leaseHeld ? .max : driver.now, ordering: .relaxed)
        // In the pool's order, not the dictionary's (which changes from run to run): a seed replays exactly.
        let entries = pool.compactMap { token in
            registered[token].map { channels in
                RegistrationBatch.Entry(
                    token: token, pushToStart: false, frequentUpdates: false, registeredAtSeconds: 1_700_000_000,
                    channels: channels.map { driver.channelID($0) })
            }
        }
        if !entries.isEmpty { driver.send(.register(RegistrationBatch(entries))) }
        for (position, wave) in waves.enumerated() where !wave.isComplete {
            guard let (update, old) = published[wave.id] else { continue }
            var mode = Shard.ResumeMode.resume
            if newestWave[old.channel] != wave.id {
                mode = .supersede
            } else if old.deadline != 0 && old.deadline <= driver.now {
                mode = .expire
            }
            let resumed = Wave(
                id: wave.id, update: update, shardCount: 1, publishedAt: wave.publishedAt, breaker: driver.breaker,
                restarts: wave.restarts + 1, onComplete: nil)
            let again = PublishedUpdate(
                wave: resumed, update: update, channel: old.channel, sequence: driver.nextSequence(),
                payload: old.payload,
                deadline: old.deadline)
            again.hasAlert = old.hasAlert
            driver.send(.resumeWave(ResumedWave(update: again, checkpoint: checkpoints[wave.id], mode: mode)))
            waves[position] = resumed
            published[wave.id] = (update, again)
        }
        note(graceful ? "graceful restart" : "crash and restart")
    }

    // MARK: - Rules

    /// What holds after every step.
    func check() {
        for (index, audience) in driver.shard.audiences.enumerated() where audience.busy != audience.countedBusy {
            fail("audience \(index): busy \(audience.busy), but \(audience.countedBusy) members are not idle")
        }
        for wave in waves {
            let report = wave.report
            if report.accounted > report.targeted {
                fail("wave \(wave.id): \(report.accounted) outcomes for \(report.targeted) targeted members")
            }
        }
    }

    /// The lease comes back, the breaker closes, and APNs answers everything 200 until nothing is left.
    func settle() {
        if !leaseHeld { toggleLease() }
        var rounds = 0
        while rounds < 10_000 {
            rounds += 1
            if driver.breaker.isOpen {
                _ = driver.breaker.close(pruneHeldTokens: false)
                driver.send(.resumeAfterBreaker(pruneHeldTokens: false))
            }
            advance(milliseconds: 100)
            poll(streams: 64)
            let answering = outstanding
            outstanding.removeAll()
            for job in answering { answer(job, .delivered) }
            check()
            if log.failure != nil { return }
            if outstanding.isEmpty && waves.allSatisfy(\.isComplete) { break }
        }
        for wave in waves {
            let report = wave.report
            if !wave.isComplete {
                fail(
                    "wave \(wave.id) never completed: \(report.accounted) of \(report.targeted) accounted; "
                        + shardState
                )
            }
            if report.accounted != report.targeted {
                fail("wave \(wave.id): \(report.accounted) outcomes for \(report.targeted) targeted members")
            }
        }
        for (index, audience) in driver.shard.audiences.enumerated() where audience.busy != 0 {
            fail("audience \(index): \(audience.busy) members still busy after every wave completed")
        }
        for (index, answers) in singleAnswers.enumerated() where answers.value.load(ordering: .relaxed) != 1 {
            fail("single push \(index) got \(answers.value.load(ordering: .relaxed)) answers")
        }
    }

    // MARK: - Reporting

    /// What the shard holds, for a failure's message.
    private var shardState: String {
        let shard = driver.shard
        let busy = shard.audiences.enumerated().filter { $0.element.busy > 0 }.map { index, audience in
            "audience \(index): \(audience.busy) busy, cursor \(audience.cursorActive ? "on" : "off")"
        }
        return "shard: paused \(shard.paused), breaker open \(driver.breaker.isOpen), held \(shard.window.heldCount), "
            + "pushes out \(shard.pushesOut), results back \(shard.resultsBack), lanes \(shard.lanes.map(\.count)), "
            + "active audiences \(shard.activeAudiences.count); " + busy.joined(separator: "; ")
    }

    private func note(_ text: String) { log.note(text) }

    private func fail(_ what: String) { log.fail(what) }
}

/// How many answers one single push got (its completion runs on the shard's thread: here the test's own).
final class AnswerCount: Sendable {
    let value = Atomic<Int>(0)
}

// Long runs stay flat: token slots, audiences, channel sets and channel ids are reused, checked with counts.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Synchronization
import Testing

@Suite(.ownThread) struct BoundedMemoryTests {
    @Test func tokenChurnReusesSlotsAndTheArenaStaysFlat() throws {
        let driver = ShardDriver()
        let population = 1_000
        var live = (0..<population).map { makeToken($0, byteCount: 80) }
        var next = population
        driver.register(live)
        var invalidated = 0
        // 60 rounds replace 6× the population: unregistered, re-registered elsewhere, or called dead by APNs.
        for round in 0..<60 {
            for token in live.prefix(70) { driver.shard.unregister(token) }
            live.removeFirst(70)
            // A re-registration with another channel set moves the token to a new slot.
            for token in live.prefix(10) { driver.register([token], channel: round % 2 == 0 ? "other" : "match") }
            let fresh = (next..<next + 70).map { makeToken($0, byteCount: 80) }
            next += 70
            driver.register(fresh)
            live += fresh
            let wave = try driver.publish(timestamp: Int64(round + 1))
            var dead = Set<DeviceToken>()
            for job in driver.take() {
                if dead.count < 20 && job.token.shardHash % 7 == 0 {
                    dead.insert(job.token)
                    driver.answer(job, ShardDriver.rejected(.unregistered))
                } else {
                    driver.answer(job, .delivered)
                }
            }
            #expect(wave.isComplete && wave.report.balanced)
            invalidated += dead.count
            live.removeAll { dead.contains($0) }
            let replacements = (next..<next + dead.count).map { makeToken($0, byteCount: 80) }
            next += dead.count
            driver.register(replacements)
            live += replacements
            // The maintenance sweep compacts audiences no wave visits (here "other").
            if round % 10 == 9 { driver.send(.sweepChannels(ChannelSweep(sequence: 0, shards: 1))) }
        }
        let tokens = driver.shard.tokens
        #expect(tokens.aliveCount == live.count)
        #expect(next - population > 5 * population, "the test churned less than intended")
        #expect(invalidated > 500)
        // Without reuse every token ever registered keeps a slot and 80 arena bytes (over 7,000 here).
        #expect(tokens.count < 2 * population, "\(tokens.count) slots for \(live.count) live tokens")
        #expect(tokens.arena.count < 2 * population * 80)
        let audienceSizes = driver.shard.audiences.map(\.count)
        #expect(audienceSizes.allSatisfy { $0 < 2 * population }, "audiences \(audienceSizes)")
        #expect(driver.shard.channelSets.liveCount <= 3)
    }

    @Test func compactionLeavesBusyMembersWhereTheirCookiesPoint() throws {
        let driver = ShardDriver()
        let tokens = (0..<1_000).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let first = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        #expect(jobs.count == 1_000)
        // The first 100 registered stay in flight (members 0..<100; waves visit members in token-hash order, so
        // pick them by token); 500 of the delivered ones are unregistered.
        let first100 = Set(tokens.prefix(100))
        let inFlight = jobs.filter { first100.contains($0.token) }
        let answered = jobs.filter { !first100.contains($0.token) }
        driver.deliver(answered)
        let gone = Set(answered.prefix(500).map(\.token))
        for token in gone { driver.shard.unregister(token) }

        // The next wave compacts the audience around the busy members and frees the dead tokens' slots.
        let second = try driver.publish(timestamp: 2)
        #expect(driver.shard.audiences[0].count == 500)
        #expect(driver.shard.tokens.freeCount == 500)
        let secondJobs = driver.take()
        #expect(secondJobs.count == 400, "the idle live members get the newer state now")
        #expect(secondJobs.allSatisfy { !gone.contains($0.token) && payloadTimestamp($0) == 2 })
        // The old cookies still name the right members: their results settle the first wave, then they get
        // the newer state they are owed.
        driver.deliver(inFlight)
        #expect(first.isComplete && first.report.delivered == 1_000 && first.report.balanced)
        let owed = driver.take()
        #expect(Set(owed.map(\.token)) == Set(inFlight.map(\.token)))
        driver.deliver(secondJobs + owed)
        #expect(second.isComplete && second.report.delivered == 500 && second.report.balanced)

        // New tokens take the freed slots: the table does not grow.
        let slotsBefore = driver.shard.tokens.count
        driver.register((2_000..<2_500).map { makeToken($0, byteCount: 80) })
        #expect(driver.shard.tokens.count == slotsBefore && driver.shard.tokens.freeCount == 0)
        let third = try driver.publish(timestamp: 3)
        driver.deliver(driver.take())
        #expect(third.report.delivered == 1_000 && third.isComplete)
    }

    @Test func aShardForgetsChannelsNothingUsesAndTheirIdsAreReused() async throws {
        // The engine's part (ids, the sweep rule) and the shard's part together: 100,000 channels, each with one
        // token (every 50th for one wave too), swept every 1,000.
        let driver = ShardDriver()
        var directory = ChannelDirectory(limit: FanoutEngine.maximumChannels)
        var sequence: UInt64 = 1
        var largestDirectory = 0
        var largestAudienceTable = 0
        for index in 0..<100_000 {
            if index % 1_000 == 0 { await Task.yield() }  // a long loop: leave the shared test threads a turn
            let name = "match-\(index)"
            guard directory.canAdmit([name]) else {
                Issue.record("channel \(index) refused: \(directory.count) in use")
                return
            }
            let id = directory.mention(name, sequence: sequence)
            sequence += 1
            let token = makeToken(index, byteCount: 80)
            driver.shard.register(
                RegistrationBatch.Entry(
                    token: token, pushToStart: false, frequentUpdates: false, registeredAtSeconds: 1, channels: [id]))
            if index % 50 == 0 {
                let wave = try driver.publishOnChannel(id, timestamp: 1)
                driver.deliver(driver.take())
                #expect(wave.isComplete && wave.report.delivered == 1)
            }
            driver.shard.unregister(token)
            if index % 1_000 == 999 {
                let sweep = ChannelSweep(sequence: sequence, shards: 1)
                sequence += 1
                driver.send(.sweepChannels(sweep))
                #expect(sweep.answers.isComplete)
                directory.forget(after: sweep)
            }
            largestDirectory = max(largestDirectory, directory.count)
            largestAudienceTable = max(largestAudienceTable, driver.shard.audiences.count)
        }
        #expect(largestDirectory <= 1_000, "the directory kept \(largestDirectory) channels")
        #expect(largestAudienceTable <= 2 * 1_000)
        // Between sweeps the unregistered tokens' slots wait for their members to go: at most 1,000 of them.
        #expect(driver.shard.tokens.count <= 1_002, "slots: \(driver.shard.tokens.count)")
        #expect(
            driver.shard.tokens.freeCount == driver.shard.tokens.count - 1, "every slot is free after the last sweep")
        #expect(driver.shard.channelSets.liveCount <= 1)
    }

    @Test func aSweepKeepsChannelsInUseOrNamedSinceItWasQueued() {
        var directory = ChannelDirectory(limit: 3)
        let a = directory.mention("a", sequence: 1)
        let b = directory.mention("b", sequence: 2)
        let c = directory.mention("c", sequence: 3, pin: true)  // a registration is between its write and its command
        #expect(!directory.canAdmit(["d"]))
        let sweep = ChannelSweep(sequence: 4, shards: 2)
        sweep.answer(used: [a])
        #expect(!sweep.answers.isComplete)
        sweep.answer(used: [])
        _ = directory.mention("b", sequence: 5)  // named after the sweep was queued: its command is behind it
        #expect(directory.forget(after: sweep) == 0)
        directory.unpin(c, sequence: 6)
        let later = ChannelSweep(sequence: 7, shards: 1)
        later.answer(used: [a])
        #expect(directory.forget(after: later) == 2)
        #expect(directory.id(of: "b") == nil && directory.id(of: "c") == nil && directory.id(of: "a") == a)
        // Freed ids are reused: three channels in use again, never more than the limit.
        let d = directory.mention("d", sequence: 8)
        let e = directory.mention("e", sequence: 9)
        #expect(Set([d, e]) == Set([b, c]))
        #expect(!directory.canAdmit(["f"]) && directory.count == 3)
    }
}

extension ShardDriver {
    /// Publishes on an engine channel id directly (tests that manage ids themselves).
    func publishOnChannel(_ channel: UInt16, timestamp: Int64) throws -> Wave {
        var content = LiveActivityContent(event: .update, timestamp: timestamp)
        content.contentState = try RawJSON(validating: #"{"t":\#(timestamp)}"#)
        let update = ChannelUpdate(channel: "c\(channel)", content: content)
        let wave = Wave(id: 1, update: update, shardCount: 1, publishedAt: now, breaker: breaker, onComplete: nil)
        let published = PublishedUpdate(
            wave: wave, update: update, channel: channel, sequence: nextSequence(),
            payload: try PushPayload(liveActivity: content),
            deadline: 0)
        send(.publish(published))
        return wave
    }
}

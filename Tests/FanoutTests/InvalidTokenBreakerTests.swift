// The invalid-token breaker on one real shard: APNs answers played by the test, the shard's own judgement.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct InvalidTokenBreakerTests {
    /// 100-result windows: small enough for the tests, the same rule as the default 1,000.
    static func breaker(window: Int = 100) -> InvalidTokenBreakerConfiguration {
        var configuration = InvalidTokenBreakerConfiguration()
        configuration.window = window
        return configuration
    }

    /// Answers in rounds of `streams` pushes, as a worker with that many streams would, until the shard has
    /// nothing more to send now. Returns how many pushes went out.
    @discardableResult
    static func answerAll(_ driver: ShardDriver, streams: Int = 50, _ answer: (PushJob) -> PushDisposition) -> Int {
        var sent = 0
        while true {
            let jobs = driver.take(streams)
            if jobs.isEmpty { return sent }
            sent += jobs.count
            for job in jobs { driver.answer(job, answer(job)) }
        }
    }

    @Test(arguments: [APNsReason.badDeviceToken, .deviceTokenNotForTopic])
    func whenEveryTokenIsCalledBadNothingIsDeletedAndTheWavePauses(reason: APNsReason) throws {
        let driver = ShardDriver(breaker: Self.breaker())
        let tokens = (0..<1_000).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let wave = try driver.publish(timestamp: 1)
        let sent = Self.answerAll(driver) { _ in ShardDriver.rejected(reason) }

        // The first window (100 results) tripped it: the shard stopped there, deleted nothing, kept every token.
        #expect(sent == 100, "the shard kept sending after its window tripped the breaker")
        guard case .open(let trip) = driver.breaker.state else {
            Issue.record("the breaker did not open")
            return
        }
        #expect(trip.results == 100 && trip.badDeviceToken + trip.deviceTokenNotForTopic == 100)
        #expect(driver.invalidations.tokens.isEmpty)
        #expect(driver.shard.tokens.aliveCount == 1_000)
        #expect(driver.shard.heldCount.load(ordering: .relaxed) == 100)
        #expect(wave.state == .paused && wave.report.state == .paused)
        #expect(wave.report.invalidated == 0 && wave.report.accounted == 0)

        // Shut down while paused: every outcome closes, the held ones with APNs' reason, and no token goes.
        driver.shard.abandonAfterStop()
        let report = wave.report
        #expect(report.isComplete && report.balanced)
        #expect(report.failedByReason[reason.rawValue] == 100 && report.failedByReason["Shutdown"] == 900)
        #expect(driver.invalidations.tokens.isEmpty && driver.shard.tokens.aliveCount == 1_000)
    }

    @Test func aNormalShareOfBadTokensIsStillPruned() throws {
        let driver = ShardDriver(breaker: Self.breaker())
        let tokens = (0..<1_000).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let dead = Set(tokens.enumerated().filter { $0.offset % 50 == 7 }.map(\.element))  // 2 %
        let wave = try driver.publish(timestamp: 1)
        Self.answerAll(driver) { dead.contains($0.token) ? ShardDriver.rejected(.badDeviceToken) : .delivered }
        #expect(driver.breaker.state == .closed)
        #expect(Set(driver.invalidations.tokens) == dead)
        let report = wave.report
        #expect(report.isComplete && report.balanced)
        #expect(report.invalidated == dead.count && report.delivered == 1_000 - dead.count)
        #expect(driver.shard.tokens.aliveCount == 1_000 - dead.count)
        #expect(driver.shard.heldCount.load(ordering: .relaxed) == 0)
    }

    @Test func aSmallWaveOfDeadTokensIsPrunedWhenItsAnswersAreIn() throws {
        // Fewer bad answers than `minimumSuspects` never trip; the window is judged as soon as nothing is out.
        let driver = ShardDriver(breaker: Self.breaker())
        let tokens = (0..<5).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        for job in jobs.dropLast() { driver.answer(job, ShardDriver.rejected(.badDeviceToken)) }
        #expect(!wave.isComplete, "bad-token answers are held until the shard's results are all in")
        #expect(driver.invalidations.tokens.isEmpty)
        driver.answer(jobs.last!, ShardDriver.rejected(.badDeviceToken))
        #expect(wave.isComplete && wave.report.invalidated == 5)
        #expect(Set(driver.invalidations.tokens) == Set(tokens))
    }

    @Test(arguments: [true, false])
    func anOperatorResetResumesTheWave(prune: Bool) throws {
        let driver = ShardDriver(breaker: Self.breaker())
        let tokens = (0..<500).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let wave = try driver.publish(timestamp: 1)
        Self.answerAll(driver) { _ in ShardDriver.rejected(.badDeviceToken) }
        #expect(driver.breaker.isOpen && wave.state == .paused)

        // The operator closes it: held tokens are pruned (they really were dead) or kept; the wave goes on.
        #expect(driver.breaker.close(pruneHeldTokens: prune))
        driver.send(.resumeAfterBreaker(pruneHeldTokens: prune))
        #expect(wave.state == .running)
        Self.answerAll(driver) { _ in .delivered }
        let report = wave.report
        #expect(report.isComplete && report.balanced && report.delivered == 400)
        if prune {
            #expect(report.invalidated == 100 && driver.invalidations.tokens.count == 100)
            #expect(driver.shard.tokens.aliveCount == 400)
        } else {
            #expect(report.failedByReason["BadDeviceToken"] == 100 && driver.invalidations.tokens.isEmpty)
            #expect(driver.shard.tokens.aliveCount == 500)
        }
    }

    @Test func aKeptTokenOwedANewerStateGetsItAfterTheReset() throws {
        let driver = ShardDriver(breaker: Self.breaker(window: 20))
        driver.register((0..<40).map { makeToken($0, byteCount: 80) })
        let first = try driver.publish(timestamp: 1)
        let jobs = driver.take(20)
        let second = try driver.publish(timestamp: 2)  // the 20 in flight are owed it
        for job in jobs { driver.answer(job, ShardDriver.rejected(.badDeviceToken)) }
        #expect(driver.breaker.isOpen && driver.take().isEmpty)
        #expect(driver.breaker.close(pruneHeldTokens: false))
        driver.send(.resumeAfterBreaker(pruneHeldTokens: false))
        let resumed = driver.take()
        #expect(resumed.count == 40 && resumed.allSatisfy { payloadTimestamp($0) == 2 })
        driver.deliver(resumed)
        #expect(
            first.report.failedByReason["BadDeviceToken"] == 20 && first.report.superseded == 20 && first.isComplete)
        #expect(second.report.delivered == 40 && second.isComplete)
    }

    @Test func anotherShardOpeningTheBreakerPausesThisOne() throws {
        let driver = ShardDriver(breaker: Self.breaker())
        driver.register((0..<100).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1)
        driver.deliver(driver.take(10))
        // Shard 1 (not driven here) trips it; this shard sees it at its next loop iteration.
        #expect(driver.breaker.open(shard: 1, results: 1000, badDeviceToken: 990, deviceTokenNotForTopic: 0))
        driver.shard.service(now: driver.now)
        #expect(driver.take().isEmpty && wave.state == .paused)
        // Single pushes still go while waves wait.
        let results = ResultBox()
        let job = PushJob(
            token: makeToken(50, byteCount: 80),
            payload: try PushPayload(#"{"aps":{"timestamp":9,"event":"update","content-state":{}}}"#))
        driver.send(SinglePush(job: job) { results.append($0) })
        let single = driver.take()
        #expect(single.count == 1 && payloadTimestamp(single[0]) == 9)
        driver.answer(single[0], ShardDriver.rejected(.badDeviceToken))
        #expect(results.all.count == 1 && driver.invalidations.tokens.isEmpty, "a held token was pruned while open")
        #expect(driver.breaker.close(pruneHeldTokens: true))
        driver.send(.resumeAfterBreaker(pruneHeldTokens: true))
        #expect(driver.invalidations.tokens == [makeToken(50, byteCount: 80)])
        driver.deliver(driver.take())
        #expect(wave.isComplete && wave.report.delivered == 99 && wave.report.invalidated == 1)
    }

    @Test func aDisabledBreakerPrunesAtOnce() throws {
        var configuration = Self.breaker()
        configuration.isEnabled = false
        let driver = ShardDriver(breaker: configuration)
        driver.register((0..<200).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1)
        Self.answerAll(driver) { _ in ShardDriver.rejected(.badDeviceToken) }
        #expect(driver.breaker.state == .closed)
        #expect(wave.isComplete && wave.report.invalidated == 200 && driver.invalidations.tokens.count == 200)
    }
}

@Suite(.ownThread) struct UnconfirmedPushTests {
    static let unconfirmed = PushDisposition.failed(.unconfirmed(cause: "connection reset"))

    @Test func byDefaultAnUnconfirmedPushFailsWithItsOwnReason() throws {
        let driver = ShardDriver()
        driver.register((0..<10).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1)
        for job in driver.take() { driver.answer(job, Self.unconfirmed) }
        driver.now += 10_000_000
        #expect(driver.take().isEmpty, "an unconfirmed push was sent again")
        let report = wave.report
        #expect(
            report.isComplete && report.balanced && report.failedByReason == ["Unconfirmed": 10]
                && report.unconfirmed == 10)
        #expect(report.retried == 0 && report.possibleDuplicates == 0)
    }

    @Test func aNewerStateOwedAfterAnUnconfirmedPushStillGoes() throws {
        let driver = ShardDriver()
        driver.register([makeToken(1, byteCount: 80)])
        let older = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        let newer = try driver.publish(timestamp: 2)
        driver.answer(jobs[0], Self.unconfirmed)
        let next = driver.take()
        #expect(next.count == 1 && payloadTimestamp(next[0]) == 2)
        driver.deliver(next)
        #expect(older.report.failedByReason == ["Unconfirmed": 1] && newer.report.delivered == 1)
        #expect(newer.report.possibleDuplicates == 0, "a different state is not a duplicate")
    }

    @Test func whenRetriedADeliveryCountsAsAPossibleDuplicate() throws {
        let driver = ShardDriver(retryDelays: [1_000_000], retryUnconfirmed: true)
        driver.register((0..<10).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1)
        let first = driver.take()
        for (position, job) in first.enumerated() { driver.answer(job, position < 4 ? Self.unconfirmed : .delivered) }
        driver.now += 2_000_000
        let retried = driver.take()
        #expect(retried.count == 4 && retried.allSatisfy { payloadTimestamp($0) == 1 })
        driver.deliver(retried)
        let report = wave.report
        #expect(report.isComplete && report.delivered == 10 && report.retried == 4 && report.possibleDuplicates == 4)
        // The client's own resend of an unconfirmed push says so in the result: counted too.
        let again = try driver.publish(timestamp: 2)
        for job in driver.take() {
            var result = PushResult(
                cookie: job.cookie, token: job.token, disposition: .delivered, apnsID: PushIdentifier(), resends: 1,
                latencyNanoseconds: 0, worker: 0)
            result.possibleDuplicate = job.token == makeToken(0, byteCount: 80)
            driver.shard.pushCompleted(result, now: driver.now)
        }
        #expect(again.report.possibleDuplicates == 1 && again.isComplete)
    }
}

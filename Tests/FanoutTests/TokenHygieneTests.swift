@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Synchronization
import Testing

@Suite(.ownThread) struct TokenHygieneTests {
    @Test(arguments: [APNsReason.unregistered, .expiredToken, .badDeviceToken, .deviceTokenNotForTopic])
    func deadTokensAreRemovedAndReported(reason: APNsReason) throws {
        let driver = ShardDriver()
        let tokens = (0..<10).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        let dead = jobs.filter { $0.token == tokens[3] }
        for job in jobs {
            driver.answer(
                job,
                job.token == tokens[3]
                    ? ShardDriver.rejected(reason, timestamp: reason == .unregistered ? 1_800_000_000_000 : nil)
                    : .delivered)
        }
        #expect(dead.count == 1)
        #expect(wave.report.invalidated == 1 && wave.report.delivered == 9 && wave.report.balanced)
        #expect(driver.invalidations.tokens == [tokens[3]])
        let next = try driver.publish(timestamp: 2)
        #expect(next.report.targeted == 9)
        let nextJobs = driver.take()
        #expect(!nextJobs.contains { $0.token == tokens[3] })
        driver.deliver(nextJobs)
        #expect(next.isComplete)
    }

    @Test func a410OlderThanTheLatestRegistrationKeepsTheToken() throws {
        let driver = ShardDriver()
        let token = makeToken(1, byteCount: 80)
        driver.register([token], at: 1_700_000_100)
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        // APNs says the token died at 1_700_000_000 s, before the app registered it again.
        driver.answer(jobs[0], ShardDriver.rejected(.unregistered, timestamp: 1_700_000_000_000))
        #expect(wave.isComplete && wave.report.invalidated == 1)
        #expect(driver.invalidations.tokens.isEmpty)
        #expect(try driver.publish(timestamp: 2).report.targeted == 1)
    }

    @Test func aTokenThatDiesMidWaveIsCountedOnce() throws {
        let driver = ShardDriver()
        let tokens = (0..<4).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let first = try driver.publish(timestamp: 1)
        let jobs = driver.take(1)
        let second = try driver.publish(timestamp: 2)
        // The in-flight token turns out dead: both its wave and the newer one it was owed count it invalidated.
        driver.answer(jobs[0], ShardDriver.rejected(.badDeviceToken))
        let rest = driver.take()
        #expect(rest.count == 3 && !rest.contains { $0.token == jobs[0].token })
        driver.deliver(rest)
        #expect(first.report.invalidated == 1 && first.report.superseded == 3 && first.report.balanced)
        #expect(second.report.invalidated == 1 && second.report.delivered == 3 && second.report.balanced)
        #expect(second.isComplete && first.isComplete)
    }

    @Test func aChannelNamedTwiceInOneRegistrationSendsOnce() throws {
        let driver = ShardDriver()
        let token = makeToken(8, byteCount: 80)
        let match = driver.channelID("match")
        driver.shard.register(
            RegistrationBatch.Entry(
                token: token, pushToStart: false, frequentUpdates: false, registeredAtSeconds: 1,
                channels: [match, match]))
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        #expect(jobs.count == 1 && wave.report.targeted == 1)
        driver.deliver(jobs)
        #expect(wave.isComplete)
    }

    @Test func reRegistrationWithNewChannelsMovesTheToken() throws {
        let driver = ShardDriver()
        let token = makeToken(5, byteCount: 80)
        driver.register([token], channel: "a")
        driver.register([token], channel: "b")
        let onA = try driver.publish(channel: "a", timestamp: 1)
        #expect(onA.report.targeted == 0 && onA.isComplete)
        let onB = try driver.publish(channel: "b", timestamp: 1)
        let jobs = driver.take()
        #expect(jobs.map(\.token) == [token])
        driver.deliver(jobs)
        #expect(onB.report.delivered == 1)
    }
}

@Suite(.ownThread) struct SinglePushTests {
    @Test func aSinglePushGoesFirstSpendsTheBudgetAndPrunesADeadToken() throws {
        let driver = ShardDriver(standard: PriorityBudgetProfile(perHour: 12, burst: 1))
        let token = makeToken(1, byteCount: 80)
        driver.register([token, makeToken(2, byteCount: 80)])
        _ = try driver.publish(timestamp: 1)
        let results = ResultBox()
        for _ in 0..<2 {
            let job = PushJob(
                token: token, payload: try PushPayload(#"{"aps":{"timestamp":9,"event":"update","content-state":{}}}"#),
                priority: .immediate, cookie: 77)
            driver.send(SinglePush(job: job) { results.append($0) })
        }
        let jobs = driver.take(2)
        // Single pushes come before wave members; the second is over the activity's budget of one.
        #expect(jobs.map(\.priority) == [.immediate, .normal])
        #expect(jobs.allSatisfy { payloadTimestamp($0) == 9 })
        driver.answer(jobs[0], .delivered)
        driver.answer(jobs[1], ShardDriver.rejected(.unregistered))
        #expect(results.all.map(\.cookie) == [77, 77])
        #expect(results.all.map(\.isDelivered) == [true, false])
        #expect(driver.invalidations.tokens == [token])
    }
}

final class ResultBox: @unchecked Sendable {
    private let lock = Mutex<[PushResult]>([])
    func append(_ result: PushResult) { lock.withLock { $0.append(result) } }
    var all: [PushResult] { lock.withLock { $0 } }
}

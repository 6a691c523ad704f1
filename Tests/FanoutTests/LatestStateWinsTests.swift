@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct LatestStateWinsTests {
    @Test func everyTokenGetsTheWaveOnce() throws {
        let driver = ShardDriver()
        let tokens = (0..<100).map { makeToken($0, byteCount: 80) }
        driver.register(tokens)
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take()
        #expect(jobs.count == 100)
        #expect(Set(jobs.map(\.token)) == Set(tokens))
        #expect(!wave.isComplete)
        driver.deliver(jobs)
        #expect(wave.isComplete)
        let report = wave.report
        #expect(report.targeted == 100 && report.sent == 100 && report.delivered == 100 && report.balanced)
    }

    @Test func aNewerUpdateReplacesTheOlderForTokensNotYetSent() throws {
        let driver = ShardDriver()
        driver.register((0..<100).map { makeToken($0, byteCount: 80) })
        let older = try driver.publish(timestamp: 1)
        let first = driver.take(30)
        #expect(first.count == 30 && first.allSatisfy { payloadTimestamp($0) == 1 })
        let newer = try driver.publish(timestamp: 2)
        // The 70 not reached get only the newer state; the 30 in flight are owed it.
        let second = driver.take()
        #expect(second.count == 70)
        #expect(second.allSatisfy { payloadTimestamp($0) == 2 }, "a superseded update was sent")
        #expect(Set(second.map(\.token)).isDisjoint(with: Set(first.map(\.token))))
        driver.deliver(first)
        // Their older push ended: now they get the newest.
        let third = driver.take()
        #expect(third.count == 30 && third.allSatisfy { payloadTimestamp($0) == 2 })
        #expect(Set(third.map(\.token)) == Set(first.map(\.token)))
        driver.deliver(second + third)
        #expect(driver.take().isEmpty)

        let old = older.report
        #expect(old.isComplete && old.balanced)
        #expect(old.sent == 30 && old.delivered == 30 && old.superseded == 70)
        let new = newer.report
        #expect(new.isComplete && new.balanced && new.delivered == 100 && new.superseded == 0)
    }

    @Test func aBurstOfUpdatesSendsOnlyTheNewest() throws {
        let driver = ShardDriver()
        driver.register((0..<50).map { makeToken($0, byteCount: 80) })
        let waves = try (1...5).map { try driver.publish(timestamp: Int64($0)) }
        let jobs = driver.take()
        #expect(jobs.count == 50 && jobs.allSatisfy { payloadTimestamp($0) == 5 })
        driver.deliver(jobs)
        for wave in waves.dropLast() {
            #expect(wave.isComplete && wave.report.superseded == 50 && wave.report.sent == 0)
        }
        #expect(waves.last!.report.delivered == 50)
    }

    @Test func aRetrySendsTheNewestStateNotTheFailedOne() throws {
        for newerSeenFirst in [true, false] {
            let driver = ShardDriver()
            driver.register((0..<10).map { makeToken($0, byteCount: 80) })
            let older = try driver.publish(timestamp: 1)
            let first = driver.take()
            let newer = try driver.publish(timestamp: 2)
            if newerSeenFirst { #expect(driver.take().isEmpty) }  // the newer wave marks them owed
            for job in first { driver.answer(job, ShardDriver.rejected(.tooManyRequests)) }
            #expect(driver.take().isEmpty, "retries wait for their back-off")
            driver.now += 5_000_000
            let retried = driver.take()
            #expect(retried.count == 10)
            #expect(retried.allSatisfy { payloadTimestamp($0) == 2 }, "a retry re-sent the superseded state")
            driver.deliver(retried)
            #expect(driver.take().isEmpty)
            #expect(older.report.superseded == 10 && older.report.balanced && older.isComplete)
            #expect(newer.report.delivered == 10 && newer.report.balanced && newer.isComplete)
        }
    }

    @Test func retriesRunOutAndFailWithTheReason() throws {
        let driver = ShardDriver(retryDelays: [1_000_000, 1_000_000])
        driver.register([makeToken(1, byteCount: 80)])
        let wave = try driver.publish(timestamp: 1)
        for _ in 0..<3 {
            let jobs = driver.take()
            #expect(jobs.count == 1)
            driver.answer(jobs[0], ShardDriver.rejected(.internalServerError))
            driver.now += 2_000_000
        }
        #expect(driver.take().isEmpty)
        let report = wave.report
        #expect(report.isComplete && report.failed == 1 && report.retried == 2 && report.sent == 3)
        #expect(report.failedByReason == ["InternalServerError": 1])
    }

    @Test func anExpiredUpdateIsDroppedLocally() throws {
        let driver = ShardDriver()
        driver.register((0..<20).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1, deadline: driver.now + 1_000)
        driver.now += 2_000
        #expect(driver.take().isEmpty)
        #expect(wave.isComplete && wave.report.expired == 20 && wave.report.sent == 0)
    }

    @Test func theMinimumIntervalHoldsTheNewestStateBack() throws {
        let second: UInt64 = 1_000_000_000
        let driver = ShardDriver(minimumInterval: second)
        driver.register([makeToken(7, byteCount: 80)])
        let first = try driver.publish(timestamp: 1)
        driver.deliver(driver.take())
        let held = try driver.publish(timestamp: 2)
        #expect(driver.take().isEmpty, "sent twice within the minimum interval")
        let newest = try driver.publish(timestamp: 3)
        driver.now += second + 1
        let jobs = driver.take()
        #expect(jobs.count == 1 && payloadTimestamp(jobs[0]) == 3)
        driver.deliver(jobs)
        #expect(first.report.delivered == 1)
        #expect(held.report.superseded == 1 && held.isComplete)
        #expect(newest.report.delivered == 1 && newest.isComplete)
    }

    @Test func startEventsGoToPushToStartTokensOnly() throws {
        let driver = ShardDriver()
        let updates = (0..<5).map { makeToken($0, byteCount: 80) }
        let starters = (0..<3).map { makeToken($0, salt: 99, byteCount: 80) }
        driver.register(updates)
        driver.register(starters, pushToStart: true)
        let start = try driver.publish(timestamp: 1, event: .start)
        let jobs = driver.take()
        #expect(Set(jobs.map(\.token)) == Set(starters))
        driver.deliver(jobs)
        let update = try driver.publish(timestamp: 2)
        let updateJobs = driver.take()
        #expect(Set(updateJobs.map(\.token)) == Set(updates))
        driver.deliver(updateJobs)
        #expect(start.report.delivered == 3 && update.report.delivered == 5)
    }

    @Test func shutdownAccountsForEverythingStillOpen() throws {
        let driver = ShardDriver(retryDelays: [60_000_000_000])
        driver.register((0..<10).map { makeToken($0, byteCount: 80) })
        let wave = try driver.publish(timestamp: 1)
        let jobs = driver.take(4)
        driver.answer(jobs[0], .delivered)
        driver.answer(jobs[1], ShardDriver.rejected(.tooManyRequests))  // waits in a lane
        driver.answer(jobs[2], .failed(.shutdown))
        driver.answer(jobs[3], .failed(.shutdown))
        driver.shard.abandonAfterStop()
        let report = wave.report
        #expect(wave.isComplete && report.balanced)
        #expect(report.delivered == 1 && report.failedByReason["Shutdown"] == 9)
    }
}

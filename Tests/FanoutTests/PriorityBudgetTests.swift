@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct PriorityBudgetTests {
    @Test func theBucketAllowsItsBurstThenTheSustainedRate() {
        let budget = PriorityBudget(PriorityBudgetProfile(perHour: 12, burst: 4))  // one per 300 s
        var tat: UInt32 = 0
        let now: UInt32 = 1_000_000
        for _ in 0..<4 { #expect(budget.trySpend(&tat, now: now)) }
        #expect(!budget.trySpend(&tat, now: now))
        #expect(!budget.trySpend(&tat, now: now + 2_999))  // 299.9 s later: not yet
        #expect(budget.trySpend(&tat, now: now + 3_000))
        #expect(!budget.trySpend(&tat, now: now + 3_000))
        // After a long quiet spell the whole burst is back, never more.
        let later = now + 1_000_000
        for _ in 0..<4 { #expect(budget.trySpend(&tat, now: later)) }
        #expect(!budget.trySpend(&tat, now: later))
    }

    @Test func overBudgetImmediateUpdatesGoAtPriorityFiveAndCountAsDowngraded() throws {
        let driver = ShardDriver(
            standard: PriorityBudgetProfile(perHour: 12, burst: 4),
            frequent: PriorityBudgetProfile(perHour: 60, burst: 10))
        let standard = makeToken(1, byteCount: 80)
        let frequent = makeToken(2, byteCount: 80)
        driver.register([standard])
        driver.register([frequent], frequent: true)
        var priorities: [DeviceToken: [PushPriority]] = [:]
        var downgraded = 0
        for timestamp in 1...6 {
            let wave = try driver.publish(timestamp: Int64(timestamp), priority: .immediate)
            let jobs = driver.take()
            for job in jobs { priorities[job.token, default: []].append(job.priority) }
            driver.deliver(jobs)
            downgraded += wave.report.downgraded
        }
        #expect(priorities[standard] == [.immediate, .immediate, .immediate, .immediate, .normal, .normal])
        #expect(priorities[frequent] == Array(repeating: .immediate, count: 6))
        #expect(downgraded == 2)
    }

    @Test func autoSpendsTheBudgetOnAlertsOnly() throws {
        let driver = ShardDriver()
        driver.register([makeToken(1, byteCount: 80)])
        let plain = try driver.publish(timestamp: 1, priority: .auto)
        let plainJobs = driver.take()
        #expect(plainJobs.map(\.priority) == [.normal])
        driver.deliver(plainJobs)
        let alert = try driver.publish(timestamp: 2, alert: true, priority: .auto)
        let alertJobs = driver.take()
        #expect(alertJobs.map(\.priority) == [.immediate])
        driver.deliver(alertJobs)
        let tick = try driver.publish(timestamp: 3, alert: true, priority: .normal)
        let tickJobs = driver.take()
        #expect(tickJobs.map(\.priority) == [.normal])
        driver.deliver(tickJobs)
        #expect(plain.report.downgraded == 0 && alert.report.downgraded == 0 && tick.report.downgraded == 0)
    }
}

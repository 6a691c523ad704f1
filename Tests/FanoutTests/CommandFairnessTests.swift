// A shard's loop iteration takes single pushes before control work and bounds its control work, so a flood of
// publishes (each sorting its audience to start a wave) never stands between a single push, or the streams, and the
// thread. The end-to-end flood is CommandQueueFairnessTests.
@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct CommandFairnessTests {
    @Test func oneIterationTakesSinglePushesFirstAndBoundsItsControlWork() throws {
        let driver = ShardDriver()
        // An audience whose sort takes far longer than an iteration's control budget.
        driver.register((0..<100_000).map { makeToken($0, byteCount: 80) })
        var waves: [Wave] = []
        for timestamp in 1...16 {
            let (published, wave) = try driver.update(timestamp: Int64(timestamp))
            driver.queue(.publish(published))
            waves.append(wave)
        }
        let answered = ResultBox()
        let single = SinglePush(
            job: PushJob(
                token: makeToken(1_000_000, byteCount: 80),
                payload: try PushPayload(liveActivity: LiveActivityContent(event: .update, timestamp: 1)))
        ) {
            answered.append($0)
        }
        #expect(driver.shard.inbox.enqueueSingle(single))

        driver.shard.service(now: driver.now)
        // The publishes the budget left are still queued for the next iterations; the single push goes out first.
        let left = driver.shard.inbox.controlCount
        #expect(left > 0 && left < 16, "one iteration took \(16 - left) of 16 publishes")
        let first = driver.take(1)
        #expect(first.first?.token == makeToken(1_000_000, byteCount: 80), "the single push is the first push out")
        driver.deliver(first)
        #expect(answered.all.count == 1 && answered.all.first?.isDelivered == true)

        // Later iterations take the rest, in order: only the newest wave sends, the others end superseded.
        var iterations = 1
        while driver.shard.inbox.controlCount > 0 {
            driver.shard.service(now: driver.now)
            iterations += 1
        }
        #expect(iterations > 1)
        var sent = 0
        while true {
            let jobs = driver.take(1_000)
            if jobs.isEmpty { break }
            sent += jobs.count
            driver.deliver(jobs)
        }
        #expect(sent == 100_000)
        for wave in waves.dropLast() { #expect(wave.report.superseded == 100_000 && wave.report.isComplete) }
        #expect(waves.last!.report.delivered == 100_000)
    }
}

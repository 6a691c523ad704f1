import CURing
import FanfareIO
import FanfareTestSupport
import Testing

@Suite("IOLoop timers and waiting", .ownThread)
struct TimerTests {
    @Test func timersFireInDeadlineOrderAndCancelledOnesNever() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        let base = loop.now
        let ms: UInt64 = 1_000_000
        loop.schedule(at: base + 30 * ms, handler: id, tag: 1, cookie: 30)
        loop.schedule(at: base + 10 * ms, handler: id, tag: 2, cookie: 10)
        loop.schedule(at: base + 20 * ms, handler: id, tag: 3, cookie: 20)
        let cancelled = loop.schedule(at: base + 5 * ms, handler: id, tag: 4, cookie: 5)
        loop.schedule(at: base + 10 * ms, handler: id, tag: 5, cookie: 11)  // same deadline as tag 2: after it
        #expect(loop.cancelTimer(cancelled))
        #expect(!loop.cancelTimer(cancelled))  // a second cancel is a harmless no-op
        #expect(loop.pendingTimerCount == 4)

        #expect(try runLoop(loop) { recorder.timers.count == 4 })
        #expect(recorder.timers.map(\.tag) == [2, 5, 3, 1])
        #expect(recorder.timers.map(\.cookie) == [10, 11, 20, 30])
        #expect(loop.now >= base + 30 * ms)
        // Nothing else fires later.
        try loop.runOnce(maxWait: 20 * ms)
        #expect(recorder.timers.count == 4)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func manyTimersBeyondTheInitialCapacityAllFireSorted() throws {
        let loop = try IOLoop(timerCapacity: 4)
        let recorder = Recorder()
        let id = loop.register(recorder)
        let base = loop.now
        var cancelledCookies: Set<UInt64> = []
        var ids: [IOTimerID] = []
        // A scrambled order of deadlines, some cancelled.
        for i in 0..<100 {
            let cookie = UInt64((i * 37) % 100)
            ids.append(loop.schedule(at: base + cookie * 10_000, handler: id, tag: 1, cookie: cookie))
        }
        for i in stride(from: 0, to: 100, by: 7) {
            #expect(loop.cancelTimer(ids[i]))
            cancelledCookies.insert(UInt64((i * 37) % 100))
        }
        #expect(try runLoop(loop) { loop.pendingTimerCount == 0 })
        let expected = (0..<100).map(UInt64.init).filter { !cancelledCookies.contains($0) }
        #expect(recorder.timers.map(\.cookie) == expected)
    }

    @Test func aTimerAlreadyDueFiresOnTheNextTickWithoutWaiting() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.schedule(at: 0, handler: id, tag: 1, cookie: 42)
        let start = IOLoop.monotonicNanoseconds()
        let handled = try loop.runOnce(maxWait: 30_000_000_000)
        #expect(handled == 1)
        #expect(recorder.timers.map(\.cookie) == [42])
        #expect(IOLoop.monotonicNanoseconds() - start < 30_000_000_000)
    }

    @Test func theWaitIsBoundedByTheEarliestTimer() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.schedule(at: loop.now + 20_000_000, handler: id, tag: 1, cookie: 0)
        let start = IOLoop.monotonicNanoseconds()
        // One tick with a huge maxWait must still come back for the 20 ms timer.
        #expect(try runLoop(loop, maxTicks: 5, maxWait: 60_000_000_000) { recorder.timers.count == 1 })
        #expect(IOLoop.monotonicNanoseconds() - start < 60_000_000_000)
    }

    @Test func runOnceReturnsAfterMaxWaitWhenIdle() throws {
        let loop = try IOLoop()
        let handled = try loop.runOnce(maxWait: 15_000_000)
        #expect(handled == 0)
        #expect(try loop.runOnce(maxWait: 0) == 0)
    }

    @Test func timersOfAnUnregisteredHandlerDoNotFire() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.schedule(at: 0, handler: id, tag: 1, cookie: 1)
        loop.unregister(id)
        #expect(!loop.isRegistered(id))
        try loop.runOnce(maxWait: 0)
        #expect(recorder.timers.isEmpty)
        #expect(loop.pendingTimerCount == 0)
    }

    @Test func tickHandlersRunEachTickUntilRemoved() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.addTickHandler(id)
        loop.addTickHandler(id)  // idempotent
        try loop.runOnce(maxWait: 0)
        try loop.runOnce(maxWait: 0)
        #expect(recorder.ticks == 2)
        loop.removeTickHandler(id)
        try loop.runOnce(maxWait: 0)
        #expect(recorder.ticks == 2)
        loop.addTickHandler(id)
        try loop.runOnce(maxWait: 0)
        #expect(recorder.ticks == 3)
        loop.unregister(id)
        try loop.runOnce(maxWait: 0)
        #expect(recorder.ticks == 3)
    }
}

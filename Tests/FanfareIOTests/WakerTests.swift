import CURing
import FanfareIO
import FanfareTestSupport
import Synchronization
import Testing

/// Set on one thread, read on another.
final class SharedCounter: Sendable {
    let value = Atomic<Int>(0)
    func increment() { value.add(1, ordering: .releasing) }
    var current: Int { value.load(ordering: .acquiring) }
}

/// Runs on a helper IOThread: waits until the target loop is asleep, then wakes it.
final class SleepingLoopWaker: IOHandler {
    let target: IOWaker
    let sawSleeping: SharedCounter

    init(target: IOWaker, sawSleeping: SharedCounter) {
        self.target = target
        self.sawSleeping = sawSleeping
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {}

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        // Bounded spin (10 s): the target thread is about to block in runOnce.
        for _ in 0..<10_000 {
            if target.isLoopSleeping {
                sawSleeping.increment()
                break
            }
            usleep(1_000)
        }
        target.wake()
    }
}

@Suite("IOLoop cross-thread wake-up", .ownThread)
struct WakerTests {
    @Test func aWakeFromAnotherThreadEndsALongWait() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.setWakeHandler(id, tag: 77)
        try loop.runOnce(maxWait: 0)  // arm the eventfd read

        let sawSleeping = SharedCounter()
        let targetWaker = loop.waker
        let helper = try IOThread(name: "test-waker") { helperLoop in
            let waker = SleepingLoopWaker(target: targetWaker, sawSleeping: sawSleeping)
            let helperID = helperLoop.register(waker)
            helperLoop.schedule(at: 0, handler: helperID, tag: 1, cookie: 0)
        }
        defer { helper.join() }

        let start = IOLoop.monotonicNanoseconds()
        let handled = try loop.runOnce(maxWait: 60_000_000_000)
        #expect(IOLoop.monotonicNanoseconds() - start < 60_000_000_000)
        #expect(handled == 1)
        #expect(sawSleeping.current == 1)
        #expect(recorder.completions == [Recorder.Completion(tag: 77, result: 0, flags: 0)])
        #expect(loop.waker.eventFDWrites == 1)
        // Delivered once only.
        try loop.runOnce(maxWait: 0)
        #expect(recorder.completions.count == 1)
    }

    @Test func wakingAnAwakeLoopCostsNoSyscallAndKeepsItFromSleeping() throws {
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.setWakeHandler(id, tag: 5)
        for _ in 0..<100 { loop.waker.wake() }  // the loop is not waiting: only the flag changes
        #expect(loop.waker.eventFDWrites == 0)
        #expect(!loop.waker.isLoopSleeping)

        let start = IOLoop.monotonicNanoseconds()
        let handled = try loop.runOnce(maxWait: 60_000_000_000)  // must not sleep: a wake-up is pending
        #expect(IOLoop.monotonicNanoseconds() - start < 60_000_000_000)
        #expect(handled == 1)
        #expect(recorder.completions.count == 1)
        #expect(loop.waker.eventFDWrites == 0)
        try loop.runOnce(maxWait: 0)
        #expect(recorder.completions.count == 1)
    }

    @Test func ioThreadRunsItsLoopUntilStopped() throws {
        let fired = SharedCounter()
        final class Ticker: IOHandler {
            let fired: SharedCounter
            var id: IOHandlerID?
            init(fired: SharedCounter) { self.fired = fired }
            func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {}
            func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
                fired.increment()
                guard let id else { return }
                loop.schedule(at: loop.now + 1_000_000, handler: id, tag: 0, cookie: 0)
            }
        }
        let thread = try IOThread(name: "test-io-thread", cpu: 0, maxWait: 60_000_000_000) { loop in
            let ticker = Ticker(fired: fired)
            let id = loop.register(ticker)
            ticker.id = id
            loop.schedule(at: loop.now + 1_000_000, handler: id, tag: 0, cookie: 0)
        }
        for _ in 0..<5_000 where fired.current < 3 { usleep(1_000) }
        #expect(fired.current >= 3)
        // stop() must wake the loop out of its 60 s wait.
        let start = IOLoop.monotonicNanoseconds()
        thread.stop()
        #expect(thread.join() == nil)
        #expect(IOLoop.monotonicNanoseconds() - start < 60_000_000_000)
        #expect(thread.isStopRequested)
    }

    @Test func ioThreadReportsStartupAndSetupFailures() throws {
        let badCPU = #expect(throws: IOError.self) {
            _ = try IOThread(name: "bad-cpu", cpu: 1_000_000) { _ in }
        }
        #expect(badCPU?.description.contains("cannot pin to CPU 1000000") == true)

        struct SetupFailed: Error {}
        let failing = try IOThread(name: "bad-setup") { _ in throw SetupFailed() }
        #expect(failing.join() is SetupFailed)
        #expect(failing.join() is SetupFailed)  // joining again is harmless
    }

    @Test func ioThreadWhoseSetupRunsTheLoopItselfEndsWhenThatLoopReturns() throws {
        let stopFlag = SharedCounter()
        let ran = SharedCounter()
        let thread = try IOThread(name: "test-body") { loop in
            // The lead's worker style: the closure drives the loop until its own condition holds.
            try loop.run(maxWait: 5_000_000) { stopFlag.current > 0 }
            ran.increment()
        }
        stopFlag.increment()
        thread.waker.wake()
        #expect(thread.join() == nil)
        #expect(ran.current == 1)
    }
}

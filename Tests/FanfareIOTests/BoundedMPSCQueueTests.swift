import FanfareIO
import FanfareTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// The queue every cross-thread hand-off goes through (worker inboxes, shard command queues, invalidations).
@Suite(.ownThread) struct BoundedMPSCQueueTests {
    @Test func theCommandQueueLosesNothingUnderContention() async throws {
        let queue = BoundedMPSCQueue<UInt64>(capacity: 256)
        let producers = 4
        let perProducer = 50_000
        let full = Atomic<Int>(0)
        let threads = (0..<producers).map { producer in
            Thread {
                for sequence in 0..<perProducer {
                    let value = UInt64(producer) << 32 | UInt64(sequence)
                    // A full queue is back-pressure the producer sees; it tries again, nothing is dropped.
                    while !queue.enqueue(value) {
                        full.add(1, ordering: .relaxed)
                        sched_yield()
                    }
                }
            }
        }
        for thread in threads { thread.start() }
        var nextExpected = Array(repeating: 0, count: producers)
        var received = 0
        while received < producers * perProducer {
            guard let value = queue.dequeue() else {
                sched_yield()
                continue
            }
            let producer = Int(value >> 32)
            let sequence = Int(value & 0xFFFF_FFFF)
            // Each producer's items arrive once and in order.
            #expect(sequence == nextExpected[producer])
            nextExpected[producer] = sequence + 1
            received += 1
        }
        #expect(queue.dequeue() == nil)
        #expect(nextExpected == Array(repeating: perProducer, count: producers))
        #expect(full.load(ordering: .relaxed) > 0, "the test never filled the queue, so back-pressure went untested")
    }
}

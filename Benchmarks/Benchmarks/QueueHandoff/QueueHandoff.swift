// The hand-off from `APNsClient.submit` to a worker: `BoundedMPSCQueue<PushJob>` (the worker inbox).
// Single-threaded enqueue+dequeue shows the bare cost of one pass through a cell; the two-thread variant is
// the real shape (a caller thread producing, the worker thread consuming). Expected: 0 mallocs.
import Benchmark
import FanfareClient
import FanfareCore
import FanfareIO
import Foundation
import Synchronization

let benchmarks: @Sendable () -> Void = {
    // 1000 jobs per iteration (the `*` rows are per job); about 1 s per benchmark.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    Benchmark("EnqueueDequeueOneThread", configuration: configuration) { benchmark, fixture in
        let queue = fixture.queue
        for _ in benchmark.scaledIterations {
            let stored = queue.enqueue(fixture.job)
            let job = queue.dequeue()
            blackHole(stored)
            blackHole(job?.cookie)
        }
    } setup: {
        try QueueFixture()
    }

    Benchmark("ProducerToConsumerThread", configuration: configuration) { (benchmark: Benchmark, fixture: QueueFixture) in
        let queue = fixture.queue
        let consumer = fixture.consumer!
        consumer.expect(benchmark.scaledIterations.count)
        for _ in benchmark.scaledIterations {
            while !queue.enqueue(fixture.job) {}  // full: the consumer is behind, retry (back-pressure)
        }
        consumer.waitUntilDrained()
    } setup: {
        let fixture = try QueueFixture()
        fixture.consumer = ConsumerThread(queue: fixture.queue)
        return fixture
    } teardown: {
        ConsumerThread.stopAll()  // the benchmark keeps its setup state alive; do not leave a thread spinning
    }
}

/// The queue (sized like a worker inbox) and one job that every iteration enqueues again: copying a PushJob
/// retains its shared payload, it does not allocate.
final class QueueFixture {
    let queue = BoundedMPSCQueue<PushJob>(capacity: 1 << 14)
    let job: PushJob
    var consumer: ConsumerThread?

    init() throws {
        let token = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 7) })
        let payload = try PushPayload(#"{"aps":{"timestamp":1735689600,"event":"update","content-state":{"home":1}}}"#)
        job = PushJob(token: token, payload: payload, priority: .immediate, cookie: 42)
    }

}

/// The single consumer: spins on `dequeue` (as a busy worker would) and counts what it took. The producer
/// announces how many jobs an iteration sends and waits until the consumer has taken all of them.
final class ConsumerThread: @unchecked Sendable {
    private let queue: BoundedMPSCQueue<PushJob>
    private let target = Atomic<Int>(0)
    private let consumed = Atomic<Int>(0)
    private let running = Atomic<Bool>(true)
    private let stopped = DispatchSemaphore(value: 0)

    private static let live = Mutex<[ConsumerThread]>([])

    init(queue: BoundedMPSCQueue<PushJob>) {
        self.queue = queue
        let thread = Thread { [self] in run() }
        thread.name = "bench-consumer"
        thread.start()
        Self.live.withLock { $0.append(self) }
    }

    static func stopAll() {
        for consumer in live.withLock({ consumers in defer { consumers = [] }; return consumers }) { consumer.stop() }
    }

    private func run() {
        var taken = 0
        while running.load(ordering: .relaxed) {
            if let job = queue.dequeue() {
                blackHole(job.cookie)
                taken += 1
                consumed.store(taken, ordering: .releasing)
            } else if taken == target.load(ordering: .acquiring) {
                sched_yield()  // idle between iterations: give the core back
            }
        }
        stopped.signal()
    }

    /// Producer side: `count` more jobs are coming.
    func expect(_ count: Int) {
        target.add(count, ordering: .releasing)
    }

    /// Producer side: spins until the consumer has taken every announced job.
    func waitUntilDrained() {
        let goal = target.load(ordering: .relaxed)
        while consumed.load(ordering: .acquiring) < goal {}
    }

    func stop() {
        running.store(false, ordering: .relaxed)
        stopped.wait()
    }
}

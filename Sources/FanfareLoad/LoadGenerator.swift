import FanfareClient
import FanfareCore
import Synchronization

/// One worker's share of a load run, pulled by that worker as streams free up (`PushProducer`).
///
/// Closed loop: a push whenever a stream is free. Open loop (`interval`): push `i` is due at
/// `start + i * interval`; when the client falls behind, due pushes go out at once and their latency is
/// measured from the due time, so stalls are not hidden (coordinated omission).
final class LoadGenerator: PushProducer {
    private let tokens: [DeviceToken]
    private let payload: LoadPayload
    private let priority: PushPriority
    private let quota: Int?  // pushes for this worker (nil: until the deadline)
    private let endTime: UInt64?  // monotonic ns (duration runs)
    private let interval: UInt64?  // ns between pushes (open loop)
    private let cookieBase: UInt64
    private let tokenOffset: Int
    @exclusivity(unchecked) private var startTime: UInt64 = 0
    @exclusivity(unchecked) private var sequence = 0
    private let produced: Atomic<Int>
    let wallClockSeconds: @Sendable () -> Int64

    init(
        worker: Int, workers: Int, tokens: [DeviceToken], payload: LoadPayload, priority: PushPriority, quota: Int?,
        duration: UInt64?, interval: UInt64?, startTime: UInt64, wallClockSeconds: @escaping @Sendable () -> Int64
    ) {
        self.tokens = tokens
        self.payload = payload
        self.priority = priority
        self.quota = quota
        self.interval = interval
        self.startTime = startTime
        endTime = duration.map { startTime &+ $0 }
        cookieBase = UInt64(worker) << 40
        tokenOffset = (tokens.count / max(1, workers)) * worker
        produced = Atomic(0)
        self.wallClockSeconds = wallClockSeconds
    }

    /// Pushes handed out so far (any thread).
    var producedCount: Int { produced.load(ordering: .acquiring) }

    func poll(now: UInt64) -> ProducerPoll {
        ProducerPoll { poll(now: now, into: $0) }
    }

    /// Writes the next push straight into the worker's stream slot (`job`, uninitialized until `.produced`).
    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        if let quota, sequence >= quota { return .finished }
        var scheduled: UInt64? = nil
        if let interval {
            let due = startTime &+ UInt64(sequence) &* interval
            if let endTime, due >= endTime { return .finished }
            if due > now { return .wait(until: due) }
            scheduled = due
        } else if let endTime, now >= endTime {
            return .finished
        }
        let body: PushPayload
        switch payload {
        case .fixed(let shared):
            body = shared
        case .template(let template):
            do {
                body = try template.payload(sequence: sequence, timestamp: wallClockSeconds())
            } catch {
                preconditionFailure("a validated template failed to render: \(error)")
            }
        }
        job.initialize(
            to: PushJob(
                token: tokens[(tokenOffset + sequence) % tokens.count], payload: body, priority: priority,
                cookie: cookieBase | UInt64(sequence)))
        job.pointee.scheduledAt = scheduled
        sequence += 1
        produced.store(sequence, ordering: .releasing)
        return .produced
    }
}

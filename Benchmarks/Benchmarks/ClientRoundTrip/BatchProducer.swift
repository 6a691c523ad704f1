import Dispatch
import FanfareClient
import FanfareCore
import Synchronization

/// Hands the worker pushes while the benchmark has released some, all with one shared payload. Polled on the
/// worker thread; `release` is called from the benchmark thread.
final class BatchProducer: PushProducer, @unchecked Sendable {
    /// How long the worker sleeps before asking again when nothing is released. Short, so a new iteration starts
    /// promptly; the wake-ups cost nothing measured except at the tail of an iteration.
    static let idlePollNanoseconds: UInt64 = 50_000

    private let tokens: [DeviceToken]
    private let payload: PushPayload
    /// When set, every push is a broadcast on this channel (priority 5, expiration 0) instead of a token push.
    private let channel: BroadcastChannelID?
    private let released = Atomic<Int>(0)
    private var sequence = 0  // worker thread only

    init(tokens: [DeviceToken], payload: PushPayload, channel: BroadcastChannelID? = nil) {
        precondition(!tokens.isEmpty)
        self.tokens = tokens
        self.payload = payload
        self.channel = channel
    }

    /// Lets the worker take `count` more pushes.
    func release(_ count: Int) {
        released.add(count, ordering: .releasing)
    }

    func poll(now: UInt64) -> ProducerPoll {
        ProducerPoll { poll(now: now, into: $0) }
    }

    /// What the worker calls: the push is written straight into its stream slot, as `fanfare load` does.
    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        guard sequence < released.load(ordering: .acquiring) else {
            return .wait(until: now &+ Self.idlePollNanoseconds)
        }
        if let channel {
            job.initialize(to: PushJob(channel: channel, payload: payload, priority: .normal, cookie: UInt64(sequence)))
        } else {
            job.initialize(
                to: PushJob(token: tokens[sequence % tokens.count], payload: payload, priority: .immediate, cookie: UInt64(sequence)))
        }
        sequence += 1
        return .produced
    }
}

/// Counts answers on the worker thread and wakes the benchmark thread when the awaited count is reached.
final class CompletionCounter: PushResultHandler {
    private let completed = Atomic<Int>(0)
    private let target = Atomic<Int>(Int.max)
    private let notDelivered = Atomic<Int>(0)
    private let reached = DispatchSemaphore(value: 0)
    private let lastProblem = Mutex<String?>(nil)

    var completedCount: Int { completed.load(ordering: .acquiring) }
    var notDeliveredCount: Int { notDelivered.load(ordering: .acquiring) }
    var problem: String? { lastProblem.withLock { $0 } }

    /// Call before releasing the pushes that will reach `total` completions.
    func expect(total: Int) {
        target.store(total, ordering: .releasing)
    }

    /// Waits until the expected total arrived; false after `seconds` without it (a hang guard).
    func wait(seconds: Int) -> Bool {
        reached.wait(timeout: .now() + .seconds(seconds)) == .success
    }

    func pushCompleted(_ result: PushResult) {
        if !result.isDelivered {
            notDelivered.add(1, ordering: .relaxed)
            lastProblem.withLock { $0 = result.disposition.description }  // not expected; allocates, and says why
        }
        let done = completed.add(1, ordering: .acquiringAndReleasing).newValue
        if done == target.load(ordering: .acquiring) { reached.signal() }
    }
}

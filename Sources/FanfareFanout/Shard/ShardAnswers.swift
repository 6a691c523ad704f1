import FanfareIO
import Synchronization

/// Counts the shards' answers to one question asked of all of them (`ChannelSweep`, `ChannelCensus`) and wakes
/// whoever waits for the last: a blocked thread, or one suspended task. Shards answer within a loop iteration;
/// after a shutdown, `abandonAfterStop` answers for them.
final class ShardAnswers: Sendable {
    private let unanswered: Atomic<Int>
    private let lastAnswer = ThreadSignal()
    private let suspended = Mutex<(continuation: CheckedContinuation<Bool, Never>?, timer: Task<Void, Never>?)>(
        (nil, nil))

    init(shards: Int) { unanswered = Atomic(shards) }

    var isComplete: Bool { unanswered.load(ordering: .acquiring) == 0 }

    /// A shard's thread, after it recorded its answer.
    func answered() {
        guard unanswered.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        lastAnswer.post()
        resume(true)
    }

    /// Blocks until every shard answered (true) or the monotonic `deadline` (ns) passed (false). One waiter.
    func wait(until deadline: UInt64) -> Bool {
        isComplete || lastAnswer.wait(until: deadline) || isComplete
    }

    /// Suspends until every shard answered (true) or `timeout` passed (false). One waiter.
    func wait(timeout: Duration) async -> Bool {
        if isComplete { return true }
        return await withCheckedContinuation { continuation in
            let complete = suspended.withLock { state in
                guard !isComplete else { return true }
                state.continuation = continuation
                state.timer = Task {
                    try? await Task.sleep(for: timeout)
                    if !Task.isCancelled { self.resume(false) }
                }
                return false
            }
            if complete { continuation.resume(returning: true) }
        }
    }

    private func resume(_ complete: Bool) {
        let (continuation, timer) = suspended.withLock { state in
            defer { state = (nil, nil) }
            return state
        }
        timer?.cancel()
        continuation?.resume(returning: complete)
    }
}

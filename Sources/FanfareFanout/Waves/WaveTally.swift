import Synchronization

/// One shard's counters for one wave. Written by that shard's thread only (relaxed stores of its own
/// values, so no contended read-modify-write), read by anyone for progress and reports.
final class WaveTally: @unchecked Sendable {
    let targeted = Atomic<Int>(0)
    let sent = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let superseded = Atomic<Int>(0)
    let downgraded = Atomic<Int>(0)
    let expired = Atomic<Int>(0)
    let invalidated = Atomic<Int>(0)
    let retried = Atomic<Int>(0)
    /// Delivered after an attempt of the same state went out unconfirmed (the device may have it twice).
    let possibleDuplicates = Atomic<Int>(0)
    /// Sent after a restart to a member that may have had this wave's push before it.
    let resentAfterRestart = Atomic<Int>(0)
    /// Monotonic ns of the first and the last answer from APNs (0 = none yet).
    let firstAck = Atomic<UInt64>(0)
    let lastAck = Atomic<UInt64>(0)
    /// Set once, when every token this shard targeted has its outcome.
    let finished = Atomic<Bool>(false)
    private let failures: UnsafeMutablePointer<Atomic<Int>>

    init() {
        failures = .allocate(capacity: FailureReason.count)
        for index in 0..<FailureReason.count { (failures + index).initialize(to: Atomic(0)) }
    }

    deinit {
        failures.deinitialize(count: FailureReason.count)
        failures.deallocate()
    }

    /// Single writer: a load and a store instead of an atomic add.
    @inline(__always)
    static func bump(_ counter: borrowing Atomic<Int>, by amount: Int = 1) {
        counter.store(counter.load(ordering: .relaxed) &+ amount, ordering: .relaxed)
    }

    func recordFailure(reason: Int, count: Int = 1) {
        assert(reason >= 0 && reason < FailureReason.count)
        Self.bump(failed, by: count)
        Self.bump(failures[reason], by: count)
    }

    func failures(reason: Int) -> Int { failures[reason].load(ordering: .relaxed) }

    /// A resumed wave's shard starts from its checkpoint's counters (before the worker runs).
    func restore(_ checkpoint: ShardCheckpoint) {
        let counters = checkpoint.counters
        targeted.store(counters.targeted, ordering: .relaxed)
        sent.store(counters.sent, ordering: .relaxed)
        delivered.store(counters.delivered, ordering: .relaxed)
        superseded.store(counters.superseded, ordering: .relaxed)
        downgraded.store(counters.downgraded, ordering: .relaxed)
        expired.store(counters.expired, ordering: .relaxed)
        invalidated.store(counters.invalidated, ordering: .relaxed)
        retried.store(counters.retried, ordering: .relaxed)
        possibleDuplicates.store(counters.possibleDuplicates, ordering: .relaxed)
        resentAfterRestart.store(counters.resentAfterRestart, ordering: .relaxed)
        var named = 0
        for (name, count) in checkpoint.failures {
            let reason = FailureReason.index(named: name)
            Self.bump(failures[reason], by: count)
            named += count
        }
        // `failed` is the sum of the reasons; a checkpoint whose total disagrees keeps the difference unnamed.
        if counters.failed > named { Self.bump(failures[FailureReason.unknownAPNsReason], by: counters.failed - named) }
        failed.store(max(counters.failed, named), ordering: .relaxed)
    }

    /// What a checkpoint records of this tally; ack times relative to `publishedAt`.
    func snapshot(publishedAt: UInt64) -> (ShardCheckpoint.Counters, [String: Int], UInt64, UInt64) {
        var counters = ShardCheckpoint.Counters()
        counters.targeted = targeted.load(ordering: .relaxed)
        counters.sent = sent.load(ordering: .relaxed)
        counters.delivered = delivered.load(ordering: .relaxed)
        counters.failed = failed.load(ordering: .relaxed)
        counters.superseded = superseded.load(ordering: .relaxed)
        counters.downgraded = downgraded.load(ordering: .relaxed)
        counters.expired = expired.load(ordering: .relaxed)
        counters.invalidated = invalidated.load(ordering: .relaxed)
        counters.retried = retried.load(ordering: .relaxed)
        counters.possibleDuplicates = possibleDuplicates.load(ordering: .relaxed)
        counters.resentAfterRestart = resentAfterRestart.load(ordering: .relaxed)
        var named: [String: Int] = [:]
        for reason in 0..<FailureReason.count {
            let count = failures(reason: reason)
            if count > 0 { named[FailureReason.name(reason), default: 0] += count }
        }
        let first = firstAck.load(ordering: .relaxed)
        let last = lastAck.load(ordering: .relaxed)
        return (
            counters, named, first == 0 ? 0 : max(1, first &- publishedAt), last == 0 ? 0 : max(1, last &- publishedAt)
        )
    }

    func recordAck(now: UInt64) {
        if firstAck.load(ordering: .relaxed) == 0 { firstAck.store(now, ordering: .relaxed) }
        lastAck.store(now, ordering: .relaxed)
    }
}

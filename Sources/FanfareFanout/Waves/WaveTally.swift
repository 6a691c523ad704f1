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

    func recordAck(now: UInt64) {
        if firstAck.load(ordering: .relaxed) == 0 { firstAck.store(now, ordering: .relaxed) }
        lastAck.store(now, ordering: .relaxed)
    }
}

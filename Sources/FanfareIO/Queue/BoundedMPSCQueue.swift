import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A bounded multi-producer, single-consumer queue (Dmitry Vyukov's bounded MPMC with the consumer side
/// simplified to one thread), on `Synchronization.Atomic`.
///
/// Every cell carries a sequence number: a producer claims position `p` with one CAS on `enqueuePosition`, writes
/// the element, then release-stores `sequence = p + 1`; the consumer waits for that value, takes the element and
/// release-stores `sequence = p + capacity`, handing the cell to the producer one lap later. Nothing allocates
/// after `init`, and a full queue is reported to the producer (back-pressure), never dropped.
public final class BoundedMPSCQueue<Element>: @unchecked Sendable {
    public let capacity: Int
    private let mask: Int
    // A cell's sequence number and its element live in two arrays: a producer writes an element while the
    // consumer reads the sequence of the same cell (and the other way round), and a Swift access to a struct
    // holding both would overlap the other thread's atomic access (ThreadSanitizer: "Swift access race").
    private let sequences: UnsafeMutablePointer<Atomic<Int>>
    private let elements: UnsafeMutablePointer<Element?>
    // Producers and the consumer touch different counters; keep them on separate allocations (no false sharing).
    private let enqueuePosition: UnsafeMutablePointer<Atomic<Int>>
    /// Written only by the consumer; atomic because `approximateCount` reads it from any thread.
    private let dequeuePosition: UnsafeMutablePointer<Atomic<Int>>

    /// `capacity` is rounded up to a power of two (at least 2).
    public init(capacity requested: Int) {
        precondition(requested > 0, "queue capacity must be positive")
        var size = 2
        while size < requested { size <<= 1 }
        capacity = size
        mask = size - 1
        sequences = .allocate(capacity: size)
        for index in 0..<size { (sequences + index).initialize(to: Atomic(index)) }
        elements = .allocate(capacity: size)
        elements.initialize(repeating: nil, count: size)
        enqueuePosition = .allocate(capacity: 16)  // 16 × 8 bytes: its own cache lines
        enqueuePosition.initialize(to: Atomic(0))
        dequeuePosition = .allocate(capacity: 16)
        dequeuePosition.initialize(to: Atomic(0))
    }

    deinit {
        sequences.deinitialize(count: capacity)
        sequences.deallocate()
        elements.deinitialize(count: capacity)
        elements.deallocate()
        enqueuePosition.deinitialize(count: 1)
        enqueuePosition.deallocate()
        dequeuePosition.deinitialize(count: 1)
        dequeuePosition.deallocate()
    }

    /// Set in `enqueuePosition` by `close()`: every later claim fails (the position no longer matches any
    /// cell's sequence), so an element is either enqueued before the close or refused.
    private static var closedBit: Int { 1 << 62 }

    /// Any thread. Returns false when the queue is full or closed (`isClosed` tells which).
    public func enqueue(_ element: Element) -> Bool {
        var position = enqueuePosition.pointee.load(ordering: .relaxed)
        while true {
            let cell = position & mask
            let sequence = sequences[cell].load(ordering: .acquiring)
            let difference = sequence - position
            if difference == 0 {
                let (exchanged, original) = enqueuePosition.pointee.weakCompareExchange(
                    expected: position, desired: position + 1, successOrdering: .relaxed, failureOrdering: .relaxed)
                if exchanged {
                    (elements + cell).pointee = element
                    sequences[cell].store(position + 1, ordering: .releasing)
                    return true
                }
                position = original
            } else if difference < 0 {
                return false  // full: the consumer has not freed this cell yet
            } else {
                position = enqueuePosition.pointee.load(ordering: .relaxed)
            }
        }
    }

    /// Any thread: refuses every later `enqueue`. Elements enqueued before stay for the consumer, who
    /// takes the last of them with `drainClosed`. Idempotent.
    public func close() {
        _ = enqueuePosition.pointee.bitwiseOr(Self.closedBit, ordering: .acquiringAndReleasing)
    }

    /// Any thread: true once `close()` was called.
    public var isClosed: Bool {
        enqueuePosition.pointee.load(ordering: .acquiring) & Self.closedBit != 0
    }

    /// The single consumer, after `close()`: takes every element enqueued before the close, including one
    /// a producer claimed a cell for but is still writing (waited for: a few instructions).
    public func drainClosed(_ body: (Element) -> Void) {
        let position = enqueuePosition.pointee.load(ordering: .acquiring)
        precondition(position & Self.closedBit != 0, "drainClosed before close")
        let end = position & ~Self.closedBit
        while dequeuePosition.pointee.load(ordering: .relaxed) < end {
            if let element = dequeue() {
                body(element)
            } else {
                sched_yield()  // claimed, not yet published
            }
        }
    }

    /// The single consumer thread only.
    public func dequeue() -> Element? {
        let position = dequeuePosition.pointee.load(ordering: .relaxed)
        let cell = position & mask
        let sequence = sequences[cell].load(ordering: .acquiring)
        guard sequence == position + 1 else { return nil }
        let element = (elements + cell).pointee.take()
        assert(element != nil, "published cell without an element")
        sequences[cell].store(position + capacity, ordering: .releasing)
        dequeuePosition.pointee.store(position + 1, ordering: .relaxed)
        return element
    }

    /// Approximate number of queued elements (for stats and back-pressure checks). Any thread.
    public var approximateCount: Int {
        max(
            0,
            (enqueuePosition.pointee.load(ordering: .relaxed) & ~Self.closedBit)
                - dequeuePosition.pointee.load(ordering: .relaxed))
    }
}

/// A fixed set of reusable `RequestHead`s for one worker (or one connection), allocated once.
///
/// A server acquires a slot when a stream's HEADERS begin (store the slot index as nghttp2 stream user
/// data), fills `head(at:)`, and releases the slot when the stream closes. Not thread-safe: one pool per
/// worker thread.
public final class RequestHeadPool {
    public let capacity: Int
    private let heads: UnsafeMutablePointer<RequestHead>
    private let freeSlots: UnsafeMutablePointer<Int32>
    private let inUse: UnsafeMutablePointer<Bool>
    @exclusivity(unchecked) private var freeCount: Int

    public init(
        capacity: Int,
        arenaCapacity: Int = RequestHead.defaultArenaCapacity,
        bodyCapacity: Int = RequestHead.defaultBodyCapacity
    ) {
        precondition(capacity > 0 && capacity <= Int(Int32.max), "pool capacity must be positive")
        self.capacity = capacity
        heads = .allocate(capacity: capacity)
        for slot in 0..<capacity {
            (heads + slot).initialize(to: RequestHead(arenaCapacity: arenaCapacity, bodyCapacity: bodyCapacity))
        }
        freeSlots = .allocate(capacity: capacity)
        // Hand out low slots first (LIFO stack: the last entry is popped first).
        for position in 0..<capacity { freeSlots[position] = Int32(capacity - 1 - position) }
        inUse = .allocate(capacity: capacity)
        inUse.initialize(repeating: false, count: capacity)
        freeCount = capacity
    }

    deinit {
        heads.deinitialize(count: capacity)
        heads.deallocate()
        freeSlots.deallocate()
        inUse.deinitialize(count: capacity)
        inUse.deallocate()
    }

    /// Slots currently free.
    public var available: Int { freeCount }

    /// A free slot with an empty head, or nil when all are in use (refuse the stream).
    public func acquire() -> Int? {
        guard freeCount > 0 else { return nil }
        freeCount -= 1
        let slot = Int(freeSlots[freeCount])
        precondition(!inUse[slot], "slot handed out twice")
        inUse[slot] = true
        heads[slot].reset()
        return slot
    }

    /// Returns a slot taken with `acquire()`.
    public func release(_ slot: Int) {
        precondition(slot >= 0 && slot < capacity, "slot out of range")
        precondition(inUse[slot], "slot released twice")
        inUse[slot] = false
        freeSlots[freeCount] = Int32(slot)
        freeCount += 1
        assert(freeCount <= capacity)
    }

    /// The head in an acquired slot; mutate through `.pointee` (in place, no copy).
    public func head(at slot: Int) -> UnsafeMutablePointer<RequestHead> {
        precondition(slot >= 0 && slot < capacity && inUse[slot], "slot is not acquired")
        return heads + slot
    }
}

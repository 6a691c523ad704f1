/// Reusable `RequestHead`s for one worker (or one connection), allocated up front and grown on demand.
///
/// A server acquires a slot when a stream's HEADERS begin (the connection maps the session's stream to
/// the slot), fills `head(at:)`, and releases the slot when the stream closes. When every slot is in use the
/// server may `grow` the pool (that allocates: it happens only when concurrency reaches a new high, never in
/// the steady state). Not thread-safe: one pool per worker thread.
public final class RequestHeadPool {
    @exclusivity(unchecked) public private(set) var capacity: Int
    public let arenaCapacity: Int
    public let bodyCapacity: Int
    @exclusivity(unchecked) private var heads: UnsafeMutablePointer<RequestHead>
    @exclusivity(unchecked) private var freeSlots: UnsafeMutablePointer<Int32>
    @exclusivity(unchecked) private var inUse: UnsafeMutablePointer<Bool>
    @exclusivity(unchecked) private var freeCount: Int

    public init(
        capacity: Int,
        arenaCapacity: Int = RequestHead.defaultArenaCapacity,
        bodyCapacity: Int = RequestHead.defaultBodyCapacity
    ) {
        precondition(capacity > 0 && capacity <= Int(Int32.max), "pool capacity must be positive")
        self.capacity = capacity
        self.arenaCapacity = arenaCapacity
        self.bodyCapacity = bodyCapacity
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

    /// A free slot with an empty head, or nil when all are in use (grow, or refuse the stream).
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

    /// Adds slots up to `newCapacity` (new heads, the tables moved to larger storage); the new slots are handed
    /// out lowest first. Slot numbers stay valid; pointers from `head(at:)` do not (take them afresh).
    public func grow(to newCapacity: Int) {
        precondition(newCapacity <= Int(Int32.max), "pool capacity above Int32.max")
        guard newCapacity > capacity else { return }
        let newHeads = UnsafeMutablePointer<RequestHead>.allocate(capacity: newCapacity)
        newHeads.moveInitialize(from: heads, count: capacity)
        for slot in capacity..<newCapacity {
            (newHeads + slot).initialize(to: RequestHead(arenaCapacity: arenaCapacity, bodyCapacity: bodyCapacity))
        }
        heads.deallocate()
        heads = newHeads

        let newFree = UnsafeMutablePointer<Int32>.allocate(capacity: newCapacity)
        // The free slots already there stay on top of the stack (handed out first); the new ones go below
        // them, the lowest new slot uppermost.
        var position = 0
        for slot in stride(from: newCapacity - 1, through: capacity, by: -1) {
            newFree[position] = Int32(slot)
            position += 1
        }
        for index in 0..<freeCount {
            newFree[position] = freeSlots[index]
            position += 1
        }
        freeSlots.deallocate()
        freeSlots = newFree
        freeCount = position

        let newInUse = UnsafeMutablePointer<Bool>.allocate(capacity: newCapacity)
        newInUse.moveInitialize(from: inUse, count: capacity)
        (newInUse + capacity).initialize(repeating: false, count: newCapacity - capacity)
        inUse.deallocate()
        inUse = newInUse
        capacity = newCapacity
    }

    /// The head in an acquired slot; mutate through `.pointee` (in place, no copy). Valid until `grow`.
    public func head(at slot: Int) -> UnsafeMutablePointer<RequestHead> {
        precondition(slot >= 0 && slot < capacity && inUse[slot], "slot is not acquired")
        return heads + slot
    }
}

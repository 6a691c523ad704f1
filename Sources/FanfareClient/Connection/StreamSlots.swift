import FanfareCore

/// The fixed pool of in-flight request slots of one connection.
///
/// Slot `i` owns a region of a single arena holding the bytes nghttp2 reads without copying (`:path`,
/// `apns-id`, `apns-expiration`, `apns-collapse-id`) plus the response body, so a request costs no allocation
/// on our side. nghttp2 gets `i + 1` as the stream's user data, never an object reference.
struct StreamSlots: ~Copyable {
    static let pathCapacity = 224          // "/3/device/" + up to 200 hex characters
    static let apnsIDOffset = pathCapacity
    static let expirationOffset = apnsIDOffset + 40
    static let collapseOffset = expirationOffset + 24
    /// APNs allows 64 bytes; one more is kept so a longer id reaches APNs as too long (400 BadCollapseId)
    /// instead of being cut to 64 bytes that might collapse with other pushes.
    static let collapseCapacity = 65
    static let bodyOffset = collapseOffset + 72
    static let bodyCapacity = 256          // error JSON is tiny; longer bodies are truncated
    static let stride = bodyOffset + bodyCapacity

    struct Slot {
        var job: PushJob?
        var streamID: Int32 = 0
        var status: Int32 = 0
        var bodyCount: Int32 = 0
        var payloadOffset: Int32 = 0
        var pathCount: Int32 = 0
        var expirationCount: Int32 = 0
        var collapseCount: Int32 = 0
        var tokenGeneration: UInt64 = 0
        /// The job was already reported (deadline); only the stream's close is awaited.
        var abandoned = false
    }

    let capacity: Int
    private let arena: UnsafeMutableRawPointer
    private let slots: UnsafeMutablePointer<Slot>
    private let freeList: UnsafeMutablePointer<Int32>
    private(set) var freeCount: Int

    init(capacity: Int) {
        precondition(capacity > 0 && capacity <= 1 << 20)
        self.capacity = capacity
        arena = .allocate(byteCount: capacity * Self.stride, alignment: 64)
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: Slot(), count: capacity)
        freeList = .allocate(capacity: capacity)
        for index in 0..<capacity { freeList[index] = Int32(capacity - 1 - index) }
        freeCount = capacity
    }

    deinit {
        slots.deinitialize(count: capacity)
        slots.deallocate()
        freeList.deallocate()
        arena.deallocate()
    }

    var inUseCount: Int { capacity - freeCount }

    mutating func acquire() -> Int? {
        guard freeCount > 0 else { return nil }
        freeCount -= 1
        let index = Int(freeList[freeCount])
        assert(slots[index].job == nil && slots[index].streamID == 0)
        return index
    }

    mutating func release(_ index: Int) {
        assert(index >= 0 && index < capacity)
        assert(freeCount < capacity)
        slots[index] = Slot()
        freeList[freeCount] = Int32(index)
        freeCount += 1
    }

    subscript(index: Int) -> UnsafeMutablePointer<Slot> {
        assert(index >= 0 && index < capacity)
        return slots + index
    }

    func bytes(_ index: Int, offset: Int) -> UnsafeMutableRawPointer {
        assert(index >= 0 && index < capacity)
        return arena + index * Self.stride + offset
    }

    func isInUse(_ index: Int) -> Bool {
        slots[index].job != nil || slots[index].streamID != 0
    }

    /// Calls `body` for every slot holding a job (deadline sweeps, teardown).
    func forEachInUse(_ body: (Int, UnsafeMutablePointer<Slot>) -> Void) {
        for index in 0..<capacity where slots[index].job != nil || slots[index].streamID != 0 {
            body(index, slots + index)
        }
    }
}

import FanfareCore

/// The fixed pool of in-flight request slots of one connection.
///
/// A slot's index is the request number the HTTP/2 session knows it by. Jobs live in their own array,
/// not as `PushJob?` inside the slot: reading a field of an optional through a pointer copies the whole
/// job (a 250-byte move and a retain of its payload), and the session reads a request's fields several
/// times per push. What the hot path needs besides the token (body bytes, deadline, flags) is kept in the
/// slot as plain values. Slot `i` also owns a region of one arena for the response body, so a request
/// costs no allocation on our side.
struct RequestSlots: ~Copyable {
    static let bodyCapacity = 256  // error JSON is tiny; longer bodies are truncated
    static let stride = bodyCapacity

    struct Slot {
        var inUse = false
        /// `jobs[i]` is initialized.
        var hasJob = false
        /// The job was already reported (deadline); only the stream's close is awaited.
        var abandoned = false
        /// A broadcast's answer carried `apns-request-id` (it wins over an `apns-id` in the same answer).
        var answeredRequestID = false
        var status: Int32 = 0
        var bodyCount: Int32 = 0
        /// The push's payload bytes (kept alive by the job's `PushPayload` while the slot holds it).
        var requestBody = UnsafeRawBufferPointer(start: nil, count: 0)
        var deadline: UInt64 = 0
        var tokenGeneration: UInt64 = 0
    }

    let capacity: Int
    private let arena: UnsafeMutableRawPointer
    private let slots: UnsafeMutablePointer<Slot>
    private let jobs: UnsafeMutablePointer<PushJob>
    private let freeList: UnsafeMutablePointer<Int32>
    private(set) var freeCount: Int

    init(capacity: Int) {
        precondition(capacity > 0 && capacity <= 1 << 20)
        self.capacity = capacity
        arena = .allocate(byteCount: capacity * Self.stride, alignment: 64)
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: Slot(), count: capacity)
        jobs = .allocate(capacity: capacity)
        freeList = .allocate(capacity: capacity)
        for index in 0..<capacity { freeList[index] = Int32(capacity - 1 - index) }
        freeCount = capacity
    }

    deinit {
        for index in 0..<capacity where slots[index].hasJob { (jobs + index).deinitialize(count: 1) }
        slots.deinitialize(count: capacity)
        slots.deallocate()
        jobs.deallocate()
        freeList.deallocate()
        arena.deallocate()
    }

    var inUseCount: Int { capacity - freeCount }

    /// The job storage of the slot `acquireWritten` takes next (there must be a free one: check `freeCount`),
    /// uninitialized: a producer writes its push here in place, so the job is not copied on its way in.
    func nextFreeJob() -> UnsafeMutablePointer<PushJob> {
        precondition(freeCount > 0, "no free stream slot")
        return jobs + Int(freeList[freeCount - 1])
    }

    /// Takes the free slot whose job storage `nextFreeJob()` gave, after the caller initialized it.
    mutating func acquireWritten(tokenGeneration: UInt64) -> Int {
        precondition(freeCount > 0, "no free stream slot")
        freeCount -= 1
        let index = Int(freeList[freeCount])
        let slot = slots + index
        assert(!slot.pointee.inUse && !slot.pointee.hasJob)
        slot.pointee.inUse = true
        slot.pointee.hasJob = true
        slot.pointee.requestBody = jobs[index].payload.bytes
        slot.pointee.deadline = jobs[index].deadline
        slot.pointee.tokenGeneration = tokenGeneration
        return index
    }

    /// A free slot (there must be one: check `freeCount`) now holding `job`.
    mutating func acquire(_ job: consuming PushJob, tokenGeneration: UInt64) -> Int {
        nextFreeJob().initialize(to: job)
        return acquireWritten(tokenGeneration: tokenGeneration)
    }

    /// Frees slot `index`, handing back its job if it still held one.
    mutating func release(_ index: Int) -> PushJob? {
        assert(index >= 0 && index < capacity)
        assert(freeCount < capacity && slots[index].inUse)
        let job = slots[index].hasJob ? (jobs + index).move() : nil
        free(index)
        return job
    }

    /// Frees slot `index` and ends its job in place, if it still held one (its result was read from the slot).
    mutating func releaseDiscardingJob(_ index: Int) {
        assert(index >= 0 && index < capacity)
        assert(freeCount < capacity && slots[index].inUse)
        if slots[index].hasJob { (jobs + index).deinitialize(count: 1) }
        free(index)
    }

    private mutating func free(_ index: Int) {
        slots[index] = Slot()
        freeList[freeCount] = Int32(index)
        freeCount += 1
    }

    subscript(index: Int) -> UnsafeMutablePointer<Slot> {
        assert(index >= 0 && index < capacity)
        return slots + index
    }

    /// The job in slot `index` (which must hold one), read in place.
    func job(_ index: Int) -> UnsafeMutablePointer<PushJob> {
        assert(index >= 0 && index < capacity && slots[index].hasJob)
        return jobs + index
    }

    func body(_ index: Int) -> UnsafeMutableRawPointer {
        assert(index >= 0 && index < capacity)
        return arena + index * Self.stride
    }

    func isInUse(_ index: Int) -> Bool { slots[index].inUse }
}

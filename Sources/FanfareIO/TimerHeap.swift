/// One timer record. Records live in a table; the heap orders record indices.
struct TimerRecord {
    var deadline: UInt64 = 0
    /// Insertion order: equal deadlines fire in the order they were scheduled.
    var sequence: UInt64 = 0
    var cookie: UInt64 = 0
    var handlerIndex: UInt32 = 0
    var handlerGeneration: UInt32 = 0
    var generation: UInt32 = 0
    /// Position in the heap, or -1 when the record is free.
    var heapPosition: Int32 = -1
    var tag: UInt8 = 0
}

/// A timer that reached its deadline, popped from the heap.
struct DueTimer {
    var handlerIndex: UInt32
    var handlerGeneration: UInt32
    var tag: UInt8
    var cookie: UInt64
}

/// Binary min-heap of deadlines with O(log n) cancellation, in memory allocated up front.
///
/// Capacity is fixed at creation; if a burst ever exceeds it, the tables double once (one allocation) and
/// stay that size, so steady state never allocates.
struct TimerHeap: ~Copyable {
    private var records: UnsafeMutablePointer<TimerRecord>
    private var heap: UnsafeMutablePointer<Int32>
    private var freeRecords: UnsafeMutablePointer<Int32>
    private(set) var capacity: Int
    private(set) var count = 0
    private var freeCount: Int
    /// The sequence number the next scheduled timer will get.
    private(set) var nextSequence: UInt64 = 0

    init(capacity: Int) {
        precondition(capacity > 0 && capacity < Int(Int32.max))
        self.capacity = capacity
        records = .allocate(capacity: capacity)
        records.initialize(repeating: TimerRecord(), count: capacity)
        heap = .allocate(capacity: capacity)
        freeRecords = .allocate(capacity: capacity)
        // Popped from the end: record 0 is handed out first.
        for i in 0..<capacity { freeRecords[i] = Int32(capacity - 1 - i) }
        freeCount = capacity
    }

    deinit {
        records.deinitialize(count: capacity)
        records.deallocate()
        heap.deallocate()
        freeRecords.deallocate()
    }

    var earliestDeadline: UInt64? {
        count == 0 ? nil : records[Int(heap[0])].deadline
    }

    mutating func insert(
        deadline: UInt64, handlerIndex: UInt32, handlerGeneration: UInt32, tag: UInt8, cookie: UInt64
    ) -> IOTimerID {
        if freeCount == 0 { grow() }
        freeCount -= 1
        let record = Int(freeRecords[freeCount])
        assert(records[record].heapPosition == -1)
        records[record].deadline = deadline
        records[record].sequence = nextSequence
        nextSequence &+= 1
        records[record].cookie = cookie
        records[record].handlerIndex = handlerIndex
        records[record].handlerGeneration = handlerGeneration
        records[record].tag = tag
        heap[count] = Int32(record)
        records[record].heapPosition = Int32(count)
        count += 1
        siftUp(count - 1)
        return IOTimerID(index: UInt32(record), generation: records[record].generation)
    }

    /// Removes a pending timer. Returns false if it already fired or was cancelled.
    @discardableResult
    mutating func cancel(_ id: IOTimerID) -> Bool {
        let record = Int(id.index)
        guard record < capacity, records[record].generation == id.generation, records[record].heapPosition >= 0 else {
            return false
        }
        remove(at: Int(records[record].heapPosition))
        release(record)
        return true
    }

    /// Pops the earliest timer if its deadline is at or before `now` and it was scheduled before
    /// `sequenceLimit` (timers scheduled while firing wait for the next tick, so a handler that re-arms
    /// at `now` cannot keep one tick running forever).
    mutating func popDue(now: UInt64, sequenceLimit: UInt64) -> DueTimer? {
        guard count > 0 else { return nil }
        let record = Int(heap[0])
        guard records[record].deadline <= now, records[record].sequence < sequenceLimit else { return nil }
        let due = DueTimer(
            handlerIndex: records[record].handlerIndex,
            handlerGeneration: records[record].handlerGeneration,
            tag: records[record].tag,
            cookie: records[record].cookie)
        remove(at: 0)
        release(record)
        return due
    }

    // MARK: - Heap mechanics

    private func precedes(_ a: Int32, _ b: Int32) -> Bool {
        let left = records[Int(a)]
        let right = records[Int(b)]
        if left.deadline != right.deadline { return left.deadline < right.deadline }
        return left.sequence < right.sequence
    }

    private mutating func place(_ record: Int32, at position: Int) {
        heap[position] = record
        records[Int(record)].heapPosition = Int32(position)
    }

    private mutating func siftUp(_ start: Int) {
        var position = start
        let moving = heap[position]
        while position > 0 {
            let parent = (position - 1) / 2
            guard precedes(moving, heap[parent]) else { break }
            place(heap[parent], at: position)
            position = parent
        }
        place(moving, at: position)
    }

    private mutating func siftDown(_ start: Int) {
        var position = start
        let moving = heap[position]
        while true {
            let left = 2 * position + 1
            guard left < count else { break }
            let right = left + 1
            let child = right < count && precedes(heap[right], heap[left]) ? right : left
            guard precedes(heap[child], moving) else { break }
            place(heap[child], at: position)
            position = child
        }
        place(moving, at: position)
    }

    private mutating func remove(at position: Int) {
        assert(position < count)
        count -= 1
        records[Int(heap[position])].heapPosition = -1
        guard position != count else { return }
        place(heap[count], at: position)
        if position > 0 && precedes(heap[position], heap[(position - 1) / 2]) {
            siftUp(position)
        } else {
            siftDown(position)
        }
    }

    private mutating func release(_ record: Int) {
        records[record].heapPosition = -1
        records[record].generation &+= 1
        freeRecords[freeCount] = Int32(record)
        freeCount += 1
    }

    /// Doubles the tables. Only reached when more timers are pending than the capacity given at creation.
    private mutating func grow() {
        let newCapacity = capacity * 2
        precondition(newCapacity < Int(Int32.max), "IOLoop: too many timers")
        let newRecords = UnsafeMutablePointer<TimerRecord>.allocate(capacity: newCapacity)
        newRecords.moveInitialize(from: records, count: capacity)
        (newRecords + capacity).initialize(repeating: TimerRecord(), count: newCapacity - capacity)
        records.deallocate()
        records = newRecords

        let newHeap = UnsafeMutablePointer<Int32>.allocate(capacity: newCapacity)
        newHeap.initialize(from: heap, count: count)
        heap.deallocate()
        heap = newHeap

        let newFree = UnsafeMutablePointer<Int32>.allocate(capacity: newCapacity)
        assert(freeCount == 0)
        for i in 0..<(newCapacity - capacity) { newFree[i] = Int32(newCapacity - 1 - i) }
        freeCount = newCapacity - capacity
        freeRecords.deallocate()
        freeRecords = newFree
        capacity = newCapacity
    }
}

/// A CQE copied out of the kernel's ring.
struct CompletionRecord {
    var userData: UInt64
    var result: Int32
    var flags: UInt32
}

/// A fixed-capacity FIFO of copied-out completions, allocated once.
///
/// Reaping copies a batch of CQEs here and advances the kernel's CQ head once; dispatch then pops them.
/// It also holds completions reaped in an emergency (the SQ was full and the kernel said EBUSY) while a
/// dispatch is already under way.
struct CompletionQueue: ~Copyable {
    private let storage: UnsafeMutablePointer<CompletionRecord>
    private let mask: Int
    let capacity: Int
    private var head = 0
    private var tail = 0

    init(capacity requested: Int) {
        var capacity = 1
        while capacity < requested { capacity <<= 1 }
        self.capacity = capacity
        self.mask = capacity - 1
        self.storage = .allocate(capacity: capacity)
    }

    deinit {
        storage.deallocate()
    }

    var count: Int { tail - head }
    var isEmpty: Bool { head == tail }
    var freeSpace: Int { capacity - count }

    mutating func append(_ record: CompletionRecord) {
        precondition(count < capacity, "IOLoop: completion staging queue overflow")
        (storage + (tail & mask)).initialize(to: record)
        tail += 1
    }

    mutating func popFirst() -> CompletionRecord? {
        guard head != tail else { return nil }
        let record = storage[head & mask]
        head += 1
        if head == tail {
            head = 0
            tail = 0
        }
        return record
    }
}

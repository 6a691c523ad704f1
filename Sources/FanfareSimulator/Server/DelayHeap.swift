/// A fixed-capacity binary min-heap of delayed responses, keyed by due time (monotonic ns).
///
/// Latency models hand out random delays, so responses leave in due order, not arrival order.
struct DelayHeap: ~Copyable {
    struct Entry {
        var due: UInt64
        var streamID: Int32
        /// The session's stream number.
        var stream: Int32
    }

    private let entries: UnsafeMutablePointer<Entry>
    let capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
        entries = .allocate(capacity: capacity)
    }

    deinit { entries.deallocate() }

    var isEmpty: Bool { count == 0 }
    var earliest: UInt64? { count > 0 ? entries[0].due : nil }

    mutating func push(_ entry: Entry) -> Bool {
        guard count < capacity else { return false }
        var child = count
        count += 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[parent].due > entry.due else { break }
            entries[child] = entries[parent]
            child = parent
        }
        entries[child] = entry
        return true
    }

    mutating func popDue(now: UInt64) -> Entry? {
        guard count > 0, entries[0].due <= now else { return nil }
        let top = entries[0]
        count -= 1
        if count > 0 {
            let last = entries[count]
            var parent = 0
            while true {
                let left = parent * 2 + 1
                guard left < count else { break }
                let right = left + 1
                let smaller = right < count && entries[right].due < entries[left].due ? right : left
                guard entries[smaller].due < last.due else { break }
                entries[parent] = entries[smaller]
                parent = smaller
            }
            entries[parent] = last
        }
        return top
    }

    mutating func removeAll() { count = 0 }
}

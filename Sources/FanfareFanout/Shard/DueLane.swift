/// A FIFO of members waiting until a due time. Every entry of one lane waits the same delay, so entries
/// come out in due order without a heap: the shard keeps one lane per delay (the minimum interval, and one
/// per retry attempt). Grows by doubling; never shrinks (steady state: no allocation).
struct DueLane {
    private var due: [UInt64]
    private var refs: [UInt64]
    private var head = 0
    private(set) var count = 0
    /// The delay every entry of this lane waits (ns).
    let delay: UInt64

    init(delay: UInt64, capacity: Int = 256) {
        self.delay = delay
        var size = 16
        while size < capacity { size <<= 1 }
        due = Array(repeating: 0, count: size)
        refs = Array(repeating: 0, count: size)
    }

    var isEmpty: Bool { count == 0 }

    /// When the first entry is due.
    var nextDue: UInt64? { count == 0 ? nil : due[head] }

    /// Appends a member due at `at` (must not be earlier than the last entry's, which holds when every
    /// entry uses `now + delay` with a monotonic `now`).
    mutating func push(_ ref: UInt64, at: UInt64) {
        if count == due.count { grow() }
        let tail = (head + count) & (due.count - 1)
        assert(count == 0 || due[(tail - 1) & (due.count - 1)] <= at, "lane entries out of order")
        due[tail] = at
        refs[tail] = ref
        count += 1
    }

    /// The first member if it is due.
    mutating func popDue(now: UInt64) -> UInt64? {
        guard count > 0, due[head] <= now else { return nil }
        let ref = refs[head]
        head = (head + 1) & (due.count - 1)
        count -= 1
        return ref
    }

    private mutating func grow() {
        var newDue = Array(repeating: UInt64(0), count: due.count * 2)
        var newRefs = Array(repeating: UInt64(0), count: due.count * 2)
        for index in 0..<count {
            newDue[index] = due[(head + index) & (due.count - 1)]
            newRefs[index] = refs[(head + index) & (due.count - 1)]
        }
        due = newDue
        refs = newRefs
        head = 0
    }
}

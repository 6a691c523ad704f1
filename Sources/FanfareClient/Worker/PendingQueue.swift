/// A fixed-capacity FIFO ring of pushes waiting for a stream, owned by one worker thread.
struct PendingQueue<Element>: ~Copyable {
    private let storage: UnsafeMutablePointer<Element?>
    let capacity: Int
    private var head = 0
    private(set) var count = 0

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
        storage = .allocate(capacity: capacity)
        storage.initialize(repeating: nil, count: capacity)
    }

    deinit {
        storage.deinitialize(count: capacity)
        storage.deallocate()
    }

    var isEmpty: Bool { count == 0 }
    var isFull: Bool { count == capacity }

    mutating func pushBack(_ element: Element) -> Bool {
        guard count < capacity else { return false }
        storage[(head + count) % capacity] = element
        count += 1
        return true
    }

    /// Resends go first: they are the oldest work.
    mutating func pushFront(_ element: Element) -> Bool {
        guard count < capacity else { return false }
        head = (head + capacity - 1) % capacity
        storage[head] = element
        count += 1
        return true
    }

    mutating func popFront() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        assert(element != nil)
        head = (head + 1) % capacity
        count -= 1
        return element
    }

    /// Removes (in order) every element for which `shouldRemove` returns true, passing it to `removed`.
    mutating func removeAll(where shouldRemove: (Element) -> Bool, removed: (Element) -> Void) {
        var kept = 0
        for offset in 0..<count {
            let index = (head + offset) % capacity
            let element = storage[index].take()!
            if shouldRemove(element) {
                removed(element)
            } else {
                storage[(head + kept) % capacity] = element
                kept += 1
            }
        }
        count = kept
    }
}

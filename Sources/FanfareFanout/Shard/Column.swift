/// A growable buffer of plain values owned by one shard: like an Array without reference counting or
/// uniqueness checks, so the per-push path reads and writes token and member state without retain/release.
/// Copies share storage (they are views); the owner calls `deallocate()` once, in its deinit.
struct Column<Element: BitwiseCopyable> {
    private(set) var base: UnsafeMutablePointer<Element>
    private(set) var count = 0
    private(set) var capacity: Int

    init(capacity: Int = 16) {
        self.capacity = max(16, capacity)
        base = .allocate(capacity: self.capacity)
    }

    init(repeating value: Element, count: Int) {
        self.init(capacity: count)
        base.initialize(repeating: value, count: count)
        self.count = count
    }

    func deallocate() { base.deallocate() }

    @inline(__always)
    subscript(index: Int) -> Element {
        unsafeAddress {
            assert(index >= 0 && index < count, "column index \(index) out of 0..<\(count)")
            return UnsafePointer(base + index)
        }
        nonmutating unsafeMutableAddress {
            assert(index >= 0 && index < count, "column index \(index) out of 0..<\(count)")
            return base + index
        }
    }

    var indices: Range<Int> { 0..<count }

    mutating func append(_ value: Element) {
        if count == capacity { grow(to: capacity * 2) }
        (base + count).initialize(to: value)
        count += 1
    }

    mutating func reserve(_ minimum: Int) {
        if minimum > capacity { grow(to: minimum) }
    }

    mutating func removeLast(_ n: Int) {
        precondition(n >= 0 && n <= count)
        count -= n
    }

    private mutating func grow(to newCapacity: Int) {
        let bigger = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        bigger.moveInitialize(from: base, count: count)
        base.deallocate()
        base = bigger
        capacity = newCapacity
    }

    var bytesUsed: Int { capacity * MemoryLayout<Element>.stride }
}

extension Column where Element == UInt8 {
    mutating func append(contentsOf bytes: UnsafeRawBufferPointer) {
        if count + bytes.count > capacity { grow(to: max(capacity * 2, count + bytes.count)) }
        UnsafeMutableRawPointer(base + count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        count += bytes.count
    }
}

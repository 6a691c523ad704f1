/// The decoder's dynamic table (RFC 7541 §2.3.2, §4): the peer's entries, newest first.
///
/// Names and values are stored back to back in one arena of twice the maximum table size, allocated once.
/// Live data is contiguous: new entries go at the tail, eviction advances the head, and when an entry does not
/// fit before the end of the arena the live data is moved to the front. Live data is always less than the
/// maximum size (each entry also counts 32 octets of overhead), so after that move the entry fits, and moves
/// happen at most once per `maximumSize` octets inserted. Entry bookkeeping is a ring of offsets and lengths.
struct HPACKDecoderTable: ~Copyable {
    private struct Entry {
        var offset: Int32
        var nameCount: Int32
        var valueCount: Int32
    }

    /// The largest maximum size a size update may set (what we advertised); fixes the memory.
    let capacity: Int
    /// The current maximum size (RFC 7541 §4.2), at most `capacity`.
    private(set) var maximumSize: Int
    /// Sum of the entries' sizes (name + value + 32 each).
    private(set) var size = 0
    private(set) var count = 0

    private let arena: UnsafeMutableRawPointer
    private let arenaSize: Int
    private var head = 0  // offset of the oldest entry's data
    private var tail = 0  // end of the newest entry's data

    private let entries: UnsafeMutablePointer<Entry>
    private let ringMask: Int
    private var newestSlot = 0  // ring slot of index 0 (meaningless while empty)

    init(capacity: Int) {
        precondition(capacity >= 0 && capacity <= 1 << 29, "HPACK table size out of range")
        self.capacity = capacity
        maximumSize = capacity
        arenaSize = max(2 * capacity, 1)
        arena = .allocate(byteCount: arenaSize, alignment: 16)
        var ringSize = 1
        while ringSize <= capacity / HPACKEncoderTable.entryOverhead { ringSize <<= 1 }
        ringMask = ringSize - 1
        entries = .allocate(capacity: ringSize)
        entries.initialize(repeating: Entry(offset: 0, nameCount: 0, valueCount: 0), count: ringSize)
    }

    deinit {
        arena.deallocate()
        entries.deallocate()
    }

    /// Whether `pointer` points into the arena (a name taken from this table).
    func contains(_ pointer: UnsafeRawPointer?) -> Bool {
        guard let pointer else { return false }
        return pointer >= UnsafeRawPointer(arena) && pointer < UnsafeRawPointer(arena + arenaSize)
    }

    /// The entry at `position` (0 is the newest); valid until the next insertion.
    @inline(__always)
    func entry(_ position: Int) -> (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        assert(position >= 0 && position < count)
        let entry = entries[(newestSlot - position) & ringMask]
        let name = UnsafeRawPointer(arena + Int(entry.offset))
        return (
            UnsafeRawBufferPointer(start: name, count: Int(entry.nameCount)),
            UnsafeRawBufferPointer(start: name + Int(entry.nameCount), count: Int(entry.valueCount))
        )
    }

    /// A dynamic table size update (the caller checked it against what we advertised).
    mutating func setMaximumSize(_ newSize: Int) {
        precondition(newSize >= 0 && newSize <= capacity)
        maximumSize = newSize
        evict(toFit: 0)
    }

    /// Adds an entry (RFC 7541 §4.4): evicts the oldest entries to make room; an entry larger than the maximum
    /// size empties the table and is not added. `name` and `value` must not point into this table.
    mutating func insert(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        assert(!contains(name.baseAddress) && !contains(value.baseAddress))
        let entrySize = name.count + value.count + HPACKEncoderTable.entryOverhead
        guard entrySize <= maximumSize else {
            evict(toFit: maximumSize + 1)
            return
        }
        evict(toFit: entrySize)
        let dataCount = name.count + value.count
        if tail + dataCount > arenaSize {
            // Move the live data to the front; entries keep their relative offsets.
            let live = tail - head
            if live > 0 { arena.copyMemory(from: arena + head, byteCount: live) }  // memmove
            for position in 0..<count {
                // Through a pointer: `entries[i].offset -= …` here crashes Swift 6.3's compiler under
                // -sanitize=thread ("Invalid bitcast" in the LLVM verifier).
                let entry = entries + ((newestSlot - position) & ringMask)
                entry.pointee.offset -= Int32(head)
            }
            head = 0
            tail = live
            assert(tail + dataCount <= arenaSize)
        }
        if let source = name.baseAddress { (arena + tail).copyMemory(from: source, byteCount: name.count) }
        if let source = value.baseAddress {
            (arena + tail + name.count).copyMemory(from: source, byteCount: value.count)
        }
        newestSlot = (newestSlot + 1) & ringMask
        entries[newestSlot] = Entry(
            offset: Int32(tail), nameCount: Int32(name.count), valueCount: Int32(value.count))
        if count == 0 { head = tail }
        tail += dataCount
        count += 1
        size += entrySize
        assert(count <= ringMask + 1)
    }

    /// Evicts the oldest entries until `extra` more octets fit within the maximum size.
    private mutating func evict(toFit extra: Int) {
        while size + extra > maximumSize && count > 0 {
            let oldest = entries[(newestSlot - count + 1) & ringMask]
            size -= Int(oldest.nameCount) + Int(oldest.valueCount) + HPACKEncoderTable.entryOverhead
            count -= 1
            head = Int(oldest.offset) + Int(oldest.nameCount) + Int(oldest.valueCount)
        }
        if count == 0 {
            head = 0
            tail = 0
        }
    }
}

import FanfareCore
import Glibc

/// A point in the order waves visit an audience: tokens sorted by `TokenHash`, then by their bytes (a total
/// order of distinct tokens that does not depend on where a token sits in memory, so a checkpoint can name a
/// position and a restarted engine finds it again). `token == nil` is the point before every token of that hash.
struct WalkKey: Equatable, Sendable {
    var hash: UInt64
    var token: DeviceToken?

    /// The beginning of the order.
    static let origin = WalkKey(hash: 0, token: nil)

    /// Whether this point comes after the token (`hash`, `bytes`), i.e. the token is before it.
    @inline(__always)
    func isAfter(hash other: UInt64, bytes: UnsafeRawBufferPointer) -> Bool {
        if hash != other { return hash > other }
        guard let token else { return false }
        return token.withUnsafeBytes { WalkKey.compare(bytes, $0) } < 0
    }

    /// Whether `a` comes before `b` in the walk order (a key without a token comes before the tokens of its hash).
    static func precedes(_ a: WalkKey, _ b: WalkKey) -> Bool {
        if a.hash != b.hash { return a.hash < b.hash }
        guard let second = b.token else { return false }
        guard let first = a.token else { return true }
        return first.withUnsafeBytes { x in second.withUnsafeBytes { y in compare(x, y) < 0 } }
    }

    /// Lexicographic byte order, shorter first on a common prefix.
    static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let common = min(a.count, b.count)
        if common > 0 {
            let result = memcmp(a.baseAddress!, b.baseAddress!, common)
            if result != 0 { return Int(result) }
        }
        return a.count - b.count
    }
}

/// The order one wave visits its audience in on one shard: positions → audience member indices.
///
/// A fresh wave walks the audience's live members in `WalkKey` order, starting at a key and wrapping around
/// (a superseding wave starts where the one it stopped had got to). A resumed wave first visits the members its
/// checkpoint listed as unsettled (`explicitCount` positions, in no particular order), then the key range the
/// checkpoint had not reached. Built once per wave start (sorting by hash is O(n) on average: a counting sort by
/// the top bits, then insertion sort within buckets), never per push.
struct WaveWalk {
    var members = Column<UInt32>()
    var hashes = Column<UInt64>()
    /// Positions `0..<explicitCount` are carried-over members; the key range follows.
    var explicitCount = 0
    /// Where the key range starts and ends (circularly; `from == to` is the whole circle).
    var from = WalkKey.origin
    var to = WalkKey.origin
    /// Positions that may have been sent before a restart: `0..<explicitPossiblySent` of the explicit part
    /// (sorted first), and `explicitCount..<explicitCount + rangePossiblySent` of the range.
    var explicitPossiblySent = 0
    var rangePossiblySent = 0

    var count: Int { members.count }

    func deallocate() {
        members.deallocate()
        hashes.deallocate()
    }

    /// Empties the walk. Keeps its memory up to 65,536 members (the next wave of the channel reuses it: no
    /// allocation per wave), gives a bigger one back (12 bytes per member).
    mutating func reset() {
        if members.capacity > 65_536 {
            deallocate()
            members = Column()
            hashes = Column()
        } else {
            members.removeLast(members.count)
            hashes.removeLast(hashes.count)
        }
        explicitCount = 0
        from = .origin
        to = .origin
        explicitPossiblySent = 0
        rangePossiblySent = 0
    }

    /// Appends `count` sorted entries circularly from `from`.
    mutating func appendRange(_ sorted: UnsafeMutableBufferPointer<WalkSorter.Entry>, from first: Int, count: Int) {
        members.reserve(members.count + count)
        hashes.reserve(hashes.count + count)
        var position = first
        for _ in 0..<count {
            if position == sorted.count { position = 0 }
            members.append(sorted[position].member)
            hashes.append(sorted[position].hash)
            position += 1
        }
    }

    @inline(__always)
    func possiblySent(_ position: Int) -> Bool {
        position < explicitPossiblySent || (position >= explicitCount && position - explicitCount < rangePossiblySent)
    }

    /// The key of the member at `position` (its token read from `tokens`).
    func key(at position: Int, slots: Column<UInt32>, tokens: TokenTable) -> WalkKey {
        let slot = slots[Int(members[position])]
        return WalkKey(hash: hashes[position], token: tokens.token(slot))
    }
}

/// Sorting an audience's live members into `WalkKey` order.
struct WalkSorter {
    struct Entry {
        var hash: UInt64
        var member: UInt32
    }

    /// Reused between waves (the shard's thread only).
    private var entries: UnsafeMutableBufferPointer<Entry> = .init(start: nil, count: 0)
    private var scratch: UnsafeMutableBufferPointer<Entry> = .init(start: nil, count: 0)
    private var counts: [Int] = []
    /// Sorted entries of the last `sort`.
    private(set) var sorted = 0

    mutating func deallocate() {
        entries.deallocate()
        scratch.deallocate()
        entries = .init(start: nil, count: 0)
        scratch = .init(start: nil, count: 0)
    }

    /// Gives a big audience's sort buffers back between waves (32 bytes per member).
    mutating func releaseIfLarge() {
        if entries.count > 65_536 { deallocate() }
    }

    private mutating func reserve(_ count: Int) {
        guard entries.count < count else { return }
        entries.deallocate()
        scratch.deallocate()
        let capacity = max(count, entries.count * 2, 64)
        entries = .allocate(capacity: capacity)
        scratch = .allocate(capacity: capacity)
    }

    /// Sorts the live members of an audience by key; returns the sorted entries (valid until the next call).
    mutating func sort(slots: Column<UInt32>, tokens: TokenTable) -> UnsafeMutableBufferPointer<Entry> {
        reserve(slots.count)
        var live = 0
        for member in 0..<slots.count where tokens.isAlive(slots[member]) {
            scratch[live] = Entry(hash: TokenHash.of(tokens.bytes(slots[member])), member: UInt32(member))
            live += 1
        }
        sorted = live
        guard live > 1 else {
            if live == 1 { entries[0] = scratch[0] }
            return UnsafeMutableBufferPointer(rebasing: entries[0..<live])
        }
        // Counting sort by the top bits (about four entries per bucket), then insertion sort per bucket.
        var bits = 1
        while bits < 20 && (1 << (bits + 2)) < live { bits += 1 }
        let shift = UInt64(64 - bits)
        let buckets = 1 << bits
        if counts.count < buckets + 1 { counts = Array(repeating: 0, count: buckets + 1) }
        for index in 0...buckets { counts[index] = 0 }
        for index in 0..<live { counts[Int(scratch[index].hash >> shift) + 1] += 1 }
        for index in 0..<buckets { counts[index + 1] += counts[index] }
        for index in 0..<live {
            let bucket = Int(scratch[index].hash >> shift)
            entries[counts[bucket]] = scratch[index]
            counts[bucket] += 1
        }
        // counts[b] is now the end of bucket b; buckets are contiguous, so one insertion sort over the whole
        // array only ever moves an entry within its bucket.
        for index in 1..<live {
            let entry = entries[index]
            var position = index
            while position > 0 && Self.less(entry, entries[position - 1], slots: slots, tokens: tokens) {
                entries[position] = entries[position - 1]
                position -= 1
            }
            entries[position] = entry
        }
        return UnsafeMutableBufferPointer(rebasing: entries[0..<live])
    }

    @inline(__always)
    static func less(_ a: Entry, _ b: Entry, slots: Column<UInt32>, tokens: TokenTable) -> Bool {
        if a.hash != b.hash { return a.hash < b.hash }
        return WalkKey.compare(tokens.bytes(slots[Int(a.member)]), tokens.bytes(slots[Int(b.member)])) < 0
    }

    /// The first position in `sorted` whose token is not before `key`.
    static func lowerBound(
        _ key: WalkKey, in sorted: UnsafeMutableBufferPointer<Entry>, slots: Column<UInt32>, tokens: TokenTable
    ) -> Int {
        var low = 0
        var high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            let entry = sorted[middle]
            if key.isAfter(hash: entry.hash, bytes: tokens.bytes(slots[Int(entry.member)])) {
                low = middle + 1
            } else {
                high = middle
            }
        }
        return low
    }
}

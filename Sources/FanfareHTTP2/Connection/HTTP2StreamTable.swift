/// What a stream table keeps per stream; each side has its own entry. `next`/`previous` thread the entry
/// through one `StreamList` at a time.
protocol HTTP2StreamEntry {
    init()
    var next: Int32 { get set }
    var previous: Int32 { get set }
    /// What the peer lets us send on this stream (its SETTINGS_INITIAL_WINDOW_SIZE and WINDOW_UPDATEs).
    var sendWindow: Int32 { get set }
    /// What the peer sent on this stream and we have not yet given back with WINDOW_UPDATE.
    var receivedUnacknowledged: Int32 { get set }
}

/// Per-stream state of one session, in flat arrays indexed by the owner's small integers (`0..<capacity`),
/// plus an open-addressing map from stream id to that number. Fixed capacity, allocated once: nothing here
/// allocates per stream. The client and the server session each use it with their own entry.
struct HTTP2StreamTable<Entry: HTTP2StreamEntry>: ~Copyable {
    let capacity: Int
    private let entries: UnsafeMutablePointer<Entry>
    private let mapKeys: UnsafeMutablePointer<Int32>  // 0 = empty bucket
    private let mapValues: UnsafeMutablePointer<Int32>
    private let mapMask: Int
    private let mapShift: UInt32
    /// Stream numbers gathered by `numbers(ofStreamsAbove:)`.
    private let scratch: UnsafeMutablePointer<Int32>
    private(set) var openCount = 0

    init(capacity: Int) {
        precondition(capacity > 0 && capacity <= 1 << 20)
        self.capacity = capacity
        entries = .allocate(capacity: capacity)
        entries.initialize(repeating: Entry(), count: capacity)
        var buckets = 16
        while buckets < capacity * 4 { buckets <<= 1 }  // load ≤ 25%: short probes
        mapMask = buckets - 1
        mapShift = UInt32(32 - buckets.trailingZeroBitCount)
        mapKeys = .allocate(capacity: buckets)
        mapKeys.initialize(repeating: 0, count: buckets)
        mapValues = .allocate(capacity: buckets)
        mapValues.initialize(repeating: -1, count: buckets)
        scratch = .allocate(capacity: capacity)
    }

    deinit {
        entries.deinitialize(count: capacity)
        entries.deallocate()
        mapKeys.deallocate()
        mapValues.deallocate()
        scratch.deallocate()
    }

    subscript(request: Int) -> UnsafeMutablePointer<Entry> {
        assert(request >= 0 && request < capacity)
        return entries + request
    }

    // MARK: Stream id → request

    /// Fibonacci hashing: live stream ids are a run of consecutive odd numbers, and with linear probing an
    /// identity hash would pack them into one long cluster (every removal then shifts through all of it).
    @inline(__always)
    private func bucket(_ streamID: Int32) -> Int {
        Int(truncatingIfNeeded: (UInt32(bitPattern: streamID) &* 0x9E37_79B1) &>> mapShift)
    }

    func request(for streamID: Int32) -> Int? {
        var index = bucket(streamID)
        while true {
            let key = mapKeys[index]
            if key == streamID { return Int(mapValues[index]) }
            if key == 0 { return nil }
            index = (index + 1) & mapMask
        }
    }

    mutating func bind(_ streamID: Int32, to request: Int) {
        assert(streamID > 0 && self.request(for: streamID) == nil)
        var index = bucket(streamID)
        while mapKeys[index] != 0 { index = (index + 1) & mapMask }
        mapKeys[index] = streamID
        mapValues[index] = Int32(request)
        openCount += 1
        assert(openCount <= capacity)
    }

    /// Removes `streamID` with backward-shift deletion (linear probing keeps no tombstones).
    mutating func unbind(_ streamID: Int32) {
        var index = bucket(streamID)
        while mapKeys[index] != streamID {
            assert(mapKeys[index] != 0, "unbinding a stream that is not bound")
            index = (index + 1) & mapMask
        }
        var hole = index
        var probe = (index + 1) & mapMask
        while mapKeys[probe] != 0 {
            let home = bucket(mapKeys[probe])
            // The entry at `probe` may move into the hole if its home is not cyclically in (hole, probe].
            let distanceToProbe = (probe - home) & mapMask
            let distanceToHole = (hole - home) & mapMask
            if distanceToHole < distanceToProbe {
                mapKeys[hole] = mapKeys[probe]
                mapValues[hole] = mapValues[probe]
                hole = probe
            }
            probe = (probe + 1) & mapMask
        }
        mapKeys[hole] = 0
        mapValues[hole] = -1
        openCount -= 1
        assert(openCount >= 0)
    }

    /// The numbers of the streams whose id is above `streamID` (0: every stream), in no particular order, gathered
    /// first so that the caller may close them one by one (the map cannot change while it is walked). Valid until
    /// the next call.
    func numbers(ofStreamsAbove streamID: Int32) -> UnsafeBufferPointer<Int32> {
        var count = 0
        for bucket in 0...mapMask where mapKeys[bucket] > streamID {
            scratch[count] = mapValues[bucket]
            count += 1
        }
        return UnsafeBufferPointer(start: scratch, count: count)
    }

    /// Calls `body` for every request that has a stream (blocked or open), in no particular order.
    func forEachStream(_ body: (Int, UnsafeMutablePointer<Entry>) -> Void) {
        for bucket in 0...mapMask where mapKeys[bucket] != 0 {
            let request = Int(mapValues[bucket])
            body(request, entries + request)
        }
    }
}

/// A FIFO of entries threaded through their `next/previous`: O(1) append, pop and removal from the middle
/// (a cancelled request leaves its list at once).
struct StreamList {
    private(set) var head: Int32 = -1
    private(set) var tail: Int32 = -1
    private(set) var count = 0

    var isEmpty: Bool { head < 0 }

    mutating func append<Entry>(_ request: Int, in table: borrowing HTTP2StreamTable<Entry>) {
        let entry = table[request]
        assert(entry.pointee.next == -1 && entry.pointee.previous == -1 && head != Int32(request))
        entry.pointee.previous = tail
        entry.pointee.next = -1
        if tail >= 0 { table[Int(tail)].pointee.next = Int32(request) } else { head = Int32(request) }
        tail = Int32(request)
        count += 1
    }

    mutating func remove<Entry>(_ request: Int, in table: borrowing HTTP2StreamTable<Entry>) {
        let entry = table[request]
        let previous = entry.pointee.previous
        let next = entry.pointee.next
        if previous >= 0 {
            table[Int(previous)].pointee.next = next
        } else {
            assert(head == Int32(request))
            head = next
        }
        if next >= 0 {
            table[Int(next)].pointee.previous = previous
        } else {
            assert(tail == Int32(request))
            tail = previous
        }
        entry.pointee.next = -1
        entry.pointee.previous = -1
        count -= 1
        assert(count >= 0)
    }

    mutating func popFirst<Entry>(in table: borrowing HTTP2StreamTable<Entry>) -> Int? {
        guard head >= 0 else { return nil }
        let request = Int(head)
        remove(request, in: table)
        return request
    }
}

/// Send windows (§6.9), the same for both sessions.
extension HTTP2StreamTable {
    /// A new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's window by the difference (§6.9.2).
    func shiftSendWindows(by delta: Int) throws(HTTP2ConnectionError) {
        guard delta != 0 else { return }
        var overflow = false
        forEachStream { _, entry in
            let window = Int(entry.pointee.sendWindow) + delta
            if window > HTTP2Limits.maxWindowSize {
                overflow = true
                return
            }
            entry.pointee.sendWindow = Int32(window)
        }
        if overflow { throw HTTP2ConnectionError(HTTP2ErrorCode.flowControlError, "a stream window passed 2^31-1") }
    }

    /// A WINDOW_UPDATE for stream number `stream` (`streamID` on the wire).
    func widenSendWindow(_ stream: Int, by increment: Int, streamID: Int32) throws(HTTP2ConnectionError) {
        let window = Int(self[stream].pointee.sendWindow) + increment
        guard window <= HTTP2Limits.maxWindowSize else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.flowControlError, "stream \(streamID)'s window passed 2^31-1")
        }
        self[stream].pointee.sendWindow = Int32(window)
    }
}

/// The connection's send window (§6.9.1).
enum HTTP2SendWindow {
    /// A WINDOW_UPDATE on stream 0.
    static func widenConnection(_ window: inout Int, by increment: Int) throws(HTTP2ConnectionError) {
        window += increment
        guard window <= HTTP2Limits.maxWindowSize else {
            throw HTTP2ConnectionError(HTTP2ErrorCode.flowControlError, "the connection window passed 2^31-1")
        }
    }
}

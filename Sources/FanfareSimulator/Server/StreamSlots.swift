/// What the server keeps per stream beyond the request head: who owns the slot, the decision, and the
/// response bytes (apns-id, apns-unique-id, error body). One entry per `RequestHeadPool` slot.
///
/// Entries live in chunks that never move: the server session reads a response's header values from here
/// (no copy) when it writes the HEADERS frame, and a new stream may grow the table in between. Grown a
/// chunk at a time, together with the head pool; never shrinks.
struct StreamSlots: ~Copyable {
    struct State {
        var owner: UInt32 = 0  // serial of the connection the stream belongs to (0 = free)
        var streamID: Int32 = 0
        var accepted = false
        /// What the response is for (`Kind`).
        var kind = Kind.push
        var status: Int16 = 0
        var bodyCount: Int32 = 0
        var bodySent: Int32 = 0
        /// Bytes of `apns-channel-id` at `channelIDOffset` (a management 201), 0 = none.
        var channelIDCount: UInt8 = 0
    }

    enum Kind: UInt8 {
        /// A token push: `apns-id` (+ `apns-unique-id` on sandbox 200s).
        case push
        /// A broadcast: `apns-id` and `apns-request-id` (at `requestIDOffset`).
        case broadcast
        /// A management request: `apns-request-id` (at `apnsIDOffset`), maybe `apns-channel-id`.
        case management
    }

    static let slotsPerChunk = 256
    private static let chunkShift = 8
    /// Bytes of one entry: the state, then the response at `responseOffset`.
    static let responseOffset = 32
    static let responseStride = 256
    static let apnsIDOffset = 0
    static let uniqueIDOffset = 40
    /// Broadcasts: `apns-request-id` takes the unique id's place (a broadcast has no per-device id).
    static let requestIDOffset = 40
    /// Management 201s: the new channel's id (our ids are 24 bytes; room for 40).
    static let channelIDOffset = 40
    static let channelIDCapacity = 40
    static let bodyOffset = 80
    private static let entryStride = responseOffset + responseStride

    private var chunks: UnsafeMutablePointer<UnsafeMutableRawPointer>
    private var chunkTableCapacity: Int
    private(set) var chunkCount = 0

    init(capacity: Int) {
        assert(MemoryLayout<State>.stride <= Self.responseOffset)
        chunkTableCapacity = 16
        chunks = .allocate(capacity: chunkTableCapacity)
        grow(to: capacity)
    }

    deinit {
        for index in 0..<chunkCount { chunks[index].deallocate() }
        chunks.deallocate()
    }

    /// Entries available (a whole number of chunks).
    var capacity: Int { chunkCount << Self.chunkShift }

    /// Slots rounded up to whole chunks.
    static func rounded(_ slots: Int) -> Int {
        (slots + slotsPerChunk - 1) / slotsPerChunk * slotsPerChunk
    }

    /// Adds chunks until `capacity >= slots`; new entries are free.
    mutating func grow(to slots: Int) {
        while capacity < slots {
            if chunkCount == chunkTableCapacity {
                let larger = UnsafeMutablePointer<UnsafeMutableRawPointer>.allocate(capacity: chunkTableCapacity * 2)
                larger.moveInitialize(from: chunks, count: chunkCount)
                chunks.deallocate()
                chunks = larger
                chunkTableCapacity *= 2
            }
            let chunk = UnsafeMutableRawPointer.allocate(
                byteCount: Self.slotsPerChunk * Self.entryStride, alignment: 64)
            for entry in 0..<Self.slotsPerChunk {
                (chunk + entry * Self.entryStride).initializeMemory(as: State.self, to: State())
            }
            (chunks + chunkCount).initialize(to: chunk)
            chunkCount += 1
        }
    }

    @inline(__always)
    private func entry(_ slot: Int) -> UnsafeMutableRawPointer {
        chunks[slot >> Self.chunkShift] + (slot & (Self.slotsPerChunk - 1)) * Self.entryStride
    }

    @inline(__always)
    func state(_ slot: Int) -> UnsafeMutablePointer<State> {
        entry(slot).assumingMemoryBound(to: State.self)
    }

    /// The response bytes of a slot (`responseStride` bytes: apns-id, unique id, body).
    @inline(__always)
    func response(_ slot: Int) -> UnsafeMutableRawPointer {
        entry(slot) + Self.responseOffset
    }
}

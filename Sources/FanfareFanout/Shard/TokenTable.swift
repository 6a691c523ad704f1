import FanfareCore

/// A shard's tokens in compact columns (about 100 bytes per 80-byte token, index included elsewhere).
///
/// A slot is a token's index here; audience members refer to tokens by slot. A slot is reused only once it
/// is dead and no audience member points at it any more (`memberships` is 0; audience compaction drops the
/// members of dead tokens), so a member, and through it a lane entry or a push cookie, can never reach
/// another token through a stale slot. A freed slot goes to a free list of its token length (linked through
/// its unused `budget` cell) and is taken by the next token of that length, so its arena bytes are rewritten
/// in place: churn does not grow the arena.
///
/// Every field is a `Column` or a number, so the table is copied and read without reference counting (the
/// per-push path reads it through the shard).
///
/// Slot 0 is a permanent dead sentinel: audience compaction points members it cannot remove (holes left
/// around busy members) at it.
struct TokenTable {
    struct Flags: OptionSet {
        let rawValue: UInt8
        static let alive = Flags(rawValue: 1 << 0)
        static let frequentUpdates = Flags(rawValue: 1 << 1)
        static let pushToStart = Flags(rawValue: 1 << 2)
        /// A push-to-start token of an iOS 18+ device: its kick-off carries `input-push-channel` when the
        /// channel is linked to a broadcast channel.
        static let supportsBroadcast = Flags(rawValue: 1 << 3)
    }

    /// The sentinel slot (never alive, never freed, never targeted).
    static let vacant: UInt32 = 0

    /// Every token's raw bytes, back to back; `offsets[slot]`, `lengths[slot]` find one.
    private(set) var arena = Column<UInt8>(capacity: 1024)
    private(set) var offsets = Column<UInt32>()
    private(set) var lengths = Column<UInt8>()
    var flags = Column<Flags>()
    /// When the token was last registered (UNIX seconds), to ignore a 410 older than a re-registration.
    var registeredAtSeconds = Column<UInt32>()
    /// The priority-10 budget state (GCRA arrival time, deciseconds on the shard clock).
    var budget = Column<UInt32>()
    /// When a push last went to this activity (deciseconds on the shard clock), for the minimum interval.
    var lastSentAtDeciseconds = Column<UInt32>()
    /// The interned channel set the token follows (`ChannelSets`).
    var channelSet = Column<UInt32>()
    /// Audience members pointing at this slot; a dead slot is freed when it reaches 0.
    private(set) var memberships = Column<UInt16>()

    /// The first free slot of each token length (0: none); each free slot's `budget` holds the next one.
    private var freeHeads = Column<UInt32>(repeating: 0, count: DeviceToken.maximumByteCount + 1)
    private(set) var freeCount = 0

    var count: Int { offsets.count }
    private(set) var aliveCount = 0

    init() {
        // The sentinel: no bytes, never alive, so nothing targets it.
        offsets.append(0)
        lengths.append(0)
        flags.append([])
        registeredAtSeconds.append(0)
        budget.append(0)
        lastSentAtDeciseconds.append(0)
        channelSet.append(0)
        memberships.append(0)
    }

    mutating func reserve(_ capacity: Int, tokenBytes: Int) {
        arena.reserve(capacity * tokenBytes)
        offsets.reserve(capacity + 1)
        lengths.reserve(capacity + 1)
        flags.reserve(capacity + 1)
        registeredAtSeconds.reserve(capacity + 1)
        budget.reserve(capacity + 1)
        lastSentAtDeciseconds.reserve(capacity + 1)
        channelSet.reserve(capacity + 1)
        memberships.reserve(capacity + 1)
    }

    /// Frees the columns (the owning shard's deinit; the table must not be used afterwards).
    func deallocate() {
        arena.deallocate()
        offsets.deallocate()
        lengths.deallocate()
        flags.deallocate()
        registeredAtSeconds.deallocate()
        budget.deallocate()
        lastSentAtDeciseconds.deallocate()
        channelSet.deallocate()
        memberships.deallocate()
        freeHeads.deallocate()
    }

    /// Whether one more token of `byteCount` bytes fits (the arena is addressed with 32-bit offsets).
    func hasRoom(forTokenOf byteCount: Int) -> Bool {
        freeHeads[byteCount] != 0 || (arena.count + byteCount <= Int(UInt32.max) && count < Int(UInt32.max - 2))
    }

    /// Adds a live token, in a freed slot of the same length if there is one; returns its slot. The caller
    /// checked `hasRoom`.
    mutating func insert(
        _ token: DeviceToken, flags: Flags, registeredAtSeconds: UInt32, channelSet set: UInt32
    ) -> UInt32 {
        let slot: UInt32
        if freeHeads[token.byteCount] != 0 {
            slot = freeHeads[token.byteCount]
            freeCount -= 1
            let index = Int(slot)
            freeHeads[token.byteCount] = budget[index]
            token.withUnsafeBytes { bytes in
                UnsafeMutableRawPointer(arena.base + Int(offsets[index])).copyMemory(
                    from: bytes.baseAddress!, byteCount: bytes.count)
            }
            self.flags[index] = flags.union(.alive)
            self.registeredAtSeconds[index] = registeredAtSeconds
            budget[index] = 0
            lastSentAtDeciseconds[index] = 0
            channelSet[index] = set
            assert(memberships[index] == 0)
        } else {
            precondition(hasRoom(forTokenOf: token.byteCount), "token arena is full (4 GiB per shard)")
            slot = UInt32(count)
            offsets.append(UInt32(arena.count))
            lengths.append(UInt8(token.byteCount))
            token.withUnsafeBytes { arena.append(contentsOf: $0) }
            self.flags.append(flags.union(.alive))
            self.registeredAtSeconds.append(registeredAtSeconds)
            budget.append(0)
            lastSentAtDeciseconds.append(0)
            channelSet.append(set)
            memberships.append(0)
        }
        aliveCount += 1
        return slot
    }

    @inline(__always)
    func isAlive(_ slot: UInt32) -> Bool { flags[Int(slot)].contains(.alive) }

    /// Marks a token dead. Returns true if the slot became free (no member points at it).
    mutating func kill(_ slot: UInt32) -> Bool {
        let index = Int(slot)
        guard flags[index].contains(.alive) else { return false }
        flags[index].remove(.alive)
        aliveCount -= 1
        return freeIfUnused(slot)
    }

    /// One more audience member points at `slot`.
    mutating func addMembership(_ slot: UInt32) {
        let index = Int(slot)
        assert(memberships[index] < .max)
        memberships[index] &+= 1
    }

    /// An audience member pointing at `slot` was dropped. Returns true if the slot became free.
    mutating func removeMembership(_ slot: UInt32) -> Bool {
        guard slot != Self.vacant else { return false }
        let index = Int(slot)
        assert(memberships[index] > 0, "membership count of slot \(slot) underflows")
        memberships[index] &-= 1
        return freeIfUnused(slot)
    }

    private mutating func freeIfUnused(_ slot: UInt32) -> Bool {
        let index = Int(slot)
        guard slot != Self.vacant, memberships[index] == 0, !flags[index].contains(.alive) else { return false }
        let length = Int(lengths[index])
        budget[index] = freeHeads[length]
        freeHeads[length] = slot
        freeCount += 1
        return true
    }

    /// The token's bytes as a `DeviceToken` (no heap: the token type is inline).
    @inline(__always)
    func token(_ slot: UInt32) -> DeviceToken {
        let index = Int(slot)
        let start = Int(offsets[index])
        return try! DeviceToken(bytes: UnsafeBufferPointer(start: arena.base + start, count: Int(lengths[index])))
    }

    /// The token's bytes in place (valid until the table next grows).
    @inline(__always)
    func bytes(_ slot: UInt32) -> UnsafeRawBufferPointer {
        let index = Int(slot)
        return UnsafeRawBufferPointer(start: arena.base + Int(offsets[index]), count: Int(lengths[index]))
    }

    /// Whether `slot` holds exactly `token`'s bytes.
    @inline(__always)
    func matches(_ slot: UInt32, _ token: DeviceToken) -> Bool {
        let index = Int(slot)
        guard Int(lengths[index]) == token.byteCount else { return false }
        let start = Int(offsets[index])
        return token.withUnsafeBytes { bytes in memcmp(arena.base + start, bytes.baseAddress!, bytes.count) == 0 }
    }

    /// Bytes held per token (columns only), for the memory figures.
    var bytesUsed: Int {
        arena.bytesUsed + offsets.bytesUsed + lengths.bytesUsed + flags.bytesUsed + registeredAtSeconds.bytesUsed
            + budget.bytesUsed + lastSentAtDeciseconds.bytesUsed + channelSet.bytesUsed + memberships.bytesUsed
            + freeHeads.bytesUsed
    }
}

import Glibc

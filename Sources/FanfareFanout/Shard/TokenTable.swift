import FanfareCore

/// A shard's tokens in compact columns (about 100 bytes per 80-byte token, index included elsewhere).
///
/// A slot is a token's index here; audiences and results refer to tokens by slot. Slots are never reused
/// while the engine runs (a removed token's slot stays dead), so a stale slot in a cookie or a lane can
/// never point at another token.
struct TokenTable {
    struct Flags: OptionSet {
        let rawValue: UInt8
        static let alive = Flags(rawValue: 1 << 0)
        static let frequentUpdates = Flags(rawValue: 1 << 1)
        static let pushToStart = Flags(rawValue: 1 << 2)
    }

    /// Every token's raw bytes, back to back; `offsets[slot]`, `lengths[slot]` find one.
    private(set) var arena = Column<UInt8>(capacity: 1024)
    private(set) var offsets = Column<UInt32>()
    private(set) var lengths = Column<UInt8>()
    var flags = Column<Flags>()
    /// Alive: when the token was last registered (UNIX seconds), to ignore a 410 older than a re-registration.
    /// Dead: the shard's wave epoch when it died, so a wave knows whether it had targeted the token.
    var registeredOrDiedAt = Column<UInt32>()
    /// The priority-10 budget state (GCRA arrival time, deciseconds on the shard clock).
    var budget = Column<UInt32>()
    /// When a push last went to this activity (deciseconds on the shard clock), for the minimum interval.
    var lastSentAt = Column<UInt32>()
    /// The interned channel set the token follows (`ChannelSets`).
    var channelSet = Column<UInt32>()

    var count: Int { offsets.count }
    private(set) var aliveCount = 0

    mutating func reserve(_ capacity: Int, tokenBytes: Int) {
        arena.reserve(capacity * tokenBytes)
        offsets.reserve(capacity)
        lengths.reserve(capacity)
        flags.reserve(capacity)
        registeredOrDiedAt.reserve(capacity)
        budget.reserve(capacity)
        lastSentAt.reserve(capacity)
        channelSet.reserve(capacity)
    }

    /// Frees the columns (the owning shard's deinit; the table must not be used afterwards).
    func deallocate() {
        arena.deallocate()
        offsets.deallocate()
        lengths.deallocate()
        flags.deallocate()
        registeredOrDiedAt.deallocate()
        budget.deallocate()
        lastSentAt.deallocate()
        channelSet.deallocate()
    }

    /// Adds a live token; returns its slot.
    mutating func append(_ token: DeviceToken, flags: Flags, registeredAt: UInt32, channelSet set: UInt32) -> UInt32 {
        precondition(arena.count + token.byteCount <= Int(UInt32.max), "token arena is full (4 GiB per shard)")
        precondition(count < Int(UInt32.max - 1), "too many tokens in one shard")
        let slot = UInt32(count)
        offsets.append(UInt32(arena.count))
        lengths.append(UInt8(token.byteCount))
        token.withUnsafeBytes { arena.append(contentsOf: $0) }
        self.flags.append(flags.union(.alive))
        registeredOrDiedAt.append(registeredAt)
        budget.append(0)
        lastSentAt.append(0)
        channelSet.append(set)
        aliveCount += 1
        return slot
    }

    @inline(__always)
    func isAlive(_ slot: UInt32) -> Bool { flags[Int(slot)].contains(.alive) }

    /// Marks a token dead at wave epoch `epoch`.
    mutating func kill(_ slot: UInt32, epoch: UInt32) {
        let index = Int(slot)
        guard flags[index].contains(.alive) else { return }
        flags[index].remove(.alive)
        registeredOrDiedAt[index] = epoch
        aliveCount -= 1
    }

    /// The token's bytes as a `DeviceToken` (no heap: the token type is inline).
    @inline(__always)
    func token(_ slot: UInt32) -> DeviceToken {
        let index = Int(slot)
        let start = Int(offsets[index])
        return try! DeviceToken(bytes: UnsafeBufferPointer(start: arena.base + start, count: Int(lengths[index])))
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
        arena.bytesUsed + offsets.bytesUsed + lengths.bytesUsed + flags.bytesUsed + registeredOrDiedAt.bytesUsed
            + budget.bytesUsed + lastSentAt.bytesUsed + channelSet.bytesUsed
    }
}

import Glibc

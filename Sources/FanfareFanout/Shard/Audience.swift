/// The members of one channel of one kind (update tokens, or push-to-start tokens) in one shard, with
/// each member's delivery state and the cursor of the wave being fanned out to them.
///
/// Per member: its token slot, whether a push is in flight or it waits in a lane, the wave it is still
/// owed (the newest state it must get once its in-flight push or back-off ends), and its retry count:
/// 8 bytes per membership.
struct Audience {
    enum Kind: UInt8 {
        case update = 0
        case pushToStart = 1
    }

    enum MemberState: UInt8 {
        case idle = 0
        /// A push for this member is on a stream.
        case inFlight = 1
        /// This member sits in a due lane (back-off after a failure, or the minimum interval).
        case waiting = 2
    }

    var slots = Column<UInt32>()
    var states = Column<MemberState>()
    /// The wave this member still has to get (shard wave slot + 1; 0 = nothing owed).
    var owed = Column<UInt16>()
    var attempts = Column<UInt8>()

    /// Members whose token is alive (what a new wave targets).
    var alive = 0
    /// Members in flight or waiting: lanes and cookies refer to them by index, so no compaction meanwhile.
    var busy = 0

    /// The newest wave published on this audience (shard wave slot + 1; 0 = none or finished).
    var currentWave: UInt16 = 0
    /// The cursor of `currentWave`: members `(start + i) % count` for `i < visited` have been visited.
    var cursorActive = false
    var cursorStart = 0
    var cursorCount = 0
    var visited = 0
    /// The channel's newest publish sequence seen here (updates arrive in order; asserted).
    var lastSequence: UInt64 = 0

    var count: Int { slots.count }

    mutating func append(slot: UInt32) {
        precondition(slots.count < Int(UInt32.max), "audience is full")
        slots.append(slot)
        states.append(.idle)
        owed.append(0)
        attempts.append(0)
        alive += 1
    }

    /// Where a new wave's cursor starts: where the superseded one stopped, so the members that have gone
    /// longest without an update get the newest state first.
    var resumePosition: Int {
        guard cursorCount > 0 else { return 0 }
        return (cursorStart + visited) % cursorCount
    }

    /// Drops members whose token died. Only when nothing refers to members by index (no busy member, no
    /// active cursor).
    mutating func compact(isAlive: (UInt32) -> Bool) {
        precondition(busy == 0 && !cursorActive, "compacting an audience in use")
        var kept = 0
        for index in 0..<slots.count where isAlive(slots[index]) {
            slots[kept] = slots[index]
            kept += 1
        }
        slots.removeLast(slots.count - kept)
        // Nothing is busy, so every member is idle and owes nothing: only the counts shrink.
        states.removeLast(states.count - kept)
        owed.removeLast(owed.count - kept)
        attempts.removeLast(attempts.count - kept)
        for index in 0..<kept { attempts[index] = 0 }  // retry counts belonged to the old positions
        assert(kept == alive, "alive count drifted: \(kept) vs \(alive)")
    }

    func deallocate() {
        slots.deallocate()
        states.deallocate()
        owed.deallocate()
        attempts.deallocate()
    }

    var bytesUsed: Int { slots.bytesUsed + states.bytesUsed + owed.bytesUsed + attempts.bytesUsed }
}

/// A member's address inside a shard, carried in push cookies and lanes:
/// member index (32 bits) | channel (15 bits) | kind (1 bit).
struct MemberRef: Equatable {
    let raw: UInt64

    init(channel: Int, kind: Audience.Kind, member: Int) {
        assert(channel < 1 << 15 && member < 1 << 32)
        raw = UInt64(member) | UInt64(channel) << 32 | UInt64(kind.rawValue) << 47
    }

    init(raw: UInt64) { self.raw = raw & (1 << 48 - 1) }

    var member: Int { Int(raw & 0xFFFF_FFFF) }
    var channel: Int { Int(raw >> 32 & 0x7FFF) }
    var kind: Audience.Kind { raw >> 47 & 1 == 0 ? .update : .pushToStart }
}

/// Push cookies of the fan-out: a member and the shard wave slot its push belongs to. Bit 63 stays clear
/// (APNsClient reserves it for `send(_:) async` tickets).
enum FanoutCookie {
    /// Wave slots are 15 bits; the top one marks engine single pushes (no wave).
    static let maximumWaves = (1 << 15) - 1

    static func make(_ member: MemberRef, wave: Int) -> UInt64 {
        assert(wave < maximumWaves)
        return member.raw | UInt64(wave) << 48
    }

    /// The wave slot that marks a single push; the member bits then hold its slot in the shard's table.
    static let singlePush = maximumWaves

    static func single(_ slot: Int) -> UInt64 { UInt64(slot) | UInt64(singlePush) << 48 }

    static func member(_ cookie: UInt64) -> MemberRef { MemberRef(raw: cookie) }
    static func wave(_ cookie: UInt64) -> Int { Int(cookie >> 48 & 0x7FFF) }
}

/// Channel sets interned to 4 bytes per token: most tokens of a match share one set.
struct ChannelSets {
    private(set) var sets: [[UInt16]] = [[]]
    private var ids: [[UInt16]: UInt32] = [[]: 0]

    mutating func intern(_ channels: [UInt16]) -> UInt32 {
        let sorted = channels.sorted()
        if let id = ids[sorted] { return id }
        let id = UInt32(sets.count)
        sets.append(sorted)
        ids[sorted] = id
        return id
    }

    subscript(id: UInt32) -> [UInt16] { sets[Int(id)] }
}

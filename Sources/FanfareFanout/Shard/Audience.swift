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
        /// APNs called its token bad (BadDeviceToken / DeviceTokenNotForTopic) and the shard has not judged
        /// yet whether such answers are normal (see `InvalidTokenBreakerConfiguration`): its outcome waits.
        case held = 3
    }

    var slots = Column<UInt32>()
    /// Written only by the transitions below (and compaction, which moves idle members), so `busy` is right.
    private(set) var states = Column<MemberState>()
    /// The wave this member still has to get (shard wave slot + 1; 0 = nothing owed).
    var owed = Column<UInt16>()
    var attempts = Column<UInt8>()

    /// Members whose token is alive (what a new wave targets).
    var alive = 0
    /// Members in flight, waiting or held: lanes, cookies and the held list refer to them by index, so
    /// compaction leaves them where they are. Kept by the member transitions: always the members not idle.
    private(set) var busy = 0

    /// The newest wave published on this audience (shard wave slot + 1; 0 = none or finished).
    var currentWave: UInt16 = 0
    /// The cursor of `currentWave`: walk positions `0..<visited` have been visited (see `WaveWalk`). The walk
    /// stays after the cursor ends, for the wave's last checkpoint, until the next wave replaces it.
    var cursorActive = false
    var walk = WaveWalk()
    /// Whether `walk` still names the current wave's members (compaction moves members and clears it).
    var walkValid = false
    var visited = 0
    /// The cursor may not pass this position until a checkpoint that allows more is durable
    /// (`CheckpointConfiguration.window`); `Int.max` without checkpoints.
    var permit = Int.max
    /// The permit the last checkpoint taken asks for, once its generation is durable.
    var proposedPermit = 0
    var proposedGeneration: UInt64 = 0
    /// Positions before this one are settled (idle): the checkpoint scans for unsettled members from here.
    var lowWater = 0
    /// Out of `activeAudiences` because the cursor reached `permit`.
    var stalled = false
    /// The channel's newest publish sequence seen here (updates arrive in order; asserted).
    var lastSequence: UInt64 = 0

    var count: Int { slots.count }

    // MARK: - Member transitions (each asserts the state it leaves and keeps `busy`)

    /// idle → inFlight: a push for the member went on a stream.
    mutating func startSending(_ member: Int) { move(member, from: .idle, to: .inFlight) }

    /// inFlight → idle: APNs answered it, or it failed.
    mutating func finishSending(_ member: Int) { move(member, from: .inFlight, to: .idle) }

    /// idle → waiting: into a due lane (a back-off, the minimum interval), or owed a resend by the next engine.
    mutating func startWaiting(_ member: Int) { move(member, from: .idle, to: .waiting) }

    /// waiting → idle: its lane let it go.
    mutating func stopWaiting(_ member: Int) { move(member, from: .waiting, to: .idle) }

    /// idle → held: a bad-token answer waits for the invalid-token breaker's verdict.
    mutating func hold(_ member: Int) { move(member, from: .idle, to: .held) }

    /// held → idle: the breaker judged.
    mutating func release(_ member: Int) { move(member, from: .held, to: .idle) }

    @inline(__always)
    private mutating func move(_ member: Int, from old: MemberState, to new: MemberState) {
        assert(states[member] == old, "member \(member) is \(states[member]), not \(old)")
        states[member] = new
        if old == .idle { busy += 1 } else if new == .idle { busy -= 1 }
    }

    /// Members not idle, counted (tests and the schedule driver check `busy` against it).
    var countedBusy: Int {
        var count = 0
        for index in 0..<states.count where states[index] != .idle { count += 1 }
        return count
    }

    mutating func append(slot: UInt32) {
        precondition(slots.count < Int(UInt32.max), "audience is full")
        slots.append(slot)
        states.append(.idle)
        owed.append(0)
        attempts.append(0)
        alive += 1
    }

    /// Drops the members of dead tokens, calling `dropped` with each one's token slot. Busy members (in
    /// flight, waiting, held) keep their index, since lanes, cookies and the held list name them by it;
    /// idle live members move down into the holes, and a hole nothing is left to fill points at the vacant
    /// sentinel slot. Only while no cursor walks the audience (moving members would skip or repeat some).
    mutating func compact(isAlive: (UInt32) -> Bool, dropped: (UInt32) -> Void) {
        precondition(!cursorActive, "compacting an audience under a cursor")
        var pinned = 0
        var lastPinned = -1
        var keptIdle = 0
        for index in 0..<slots.count {
            if states[index] != .idle {
                pinned += 1
                lastPinned = index
            } else if isAlive(slots[index]) {
                keptIdle += 1
            }
        }
        let length = max(lastPinned + 1, pinned + keptIdle)
        // Idle live members move only downwards (the n-th of them goes to the n-th free position, which is never
        // after its own), so one forward pass can move them in place.
        var write = 0
        for read in 0..<slots.count {
            if states[read] != .idle { continue }  // pinned: stays
            let slot = slots[read]
            guard isAlive(slot) else {
                dropped(slot)
                continue
            }
            while states[write] != .idle && write < read { write += 1 }  // skip pinned positions
            if write != read {
                slots[write] = slot
                owed[write] = 0
                states[write] = .idle
            }
            attempts[write] = 0  // retry counts belonged to the old positions
            write += 1
            // Positions between `write` and `read` that are idle were read already; they are overwritten or
            // become holes below.
        }
        // Holes left below `length` (idle positions no live member moved into) point at the sentinel.
        while write < length {
            if states[write] == .idle {
                slots[write] = TokenTable.vacant
                owed[write] = 0
                attempts[write] = 0
            }
            write += 1
        }
        slots.removeLast(slots.count - length)
        states.removeLast(states.count - length)
        owed.removeLast(owed.count - length)
        attempts.removeLast(attempts.count - length)
    }

    /// Where the cursor is, as a key: the next member it would visit (its range start while it still visits
    /// carried-over members; the range end once it visited everything).
    func cursorKey(tokens: TokenTable) -> WalkKey {
        if visited < walk.explicitCount { return walk.from }
        if visited < walk.count { return walk.key(at: visited, slots: slots, tokens: tokens) }
        return walk.to
    }

    /// No member, no wave, nothing referring to it: what a shard can forget.
    var isEmpty: Bool { slots.count == 0 && currentWave == 0 && !cursorActive && busy == 0 }

    /// Whether its columns grew past their initial size.
    var hasGrown: Bool { slots.capacity > 16 }

    /// Dead members (and vacant holes) an audience carries.
    var deadCount: Int { slots.count - alive }

    func deallocate() {
        walk.deallocate()
        slots.deallocate()
        states.deallocate()
        owed.deallocate()
        attempts.deallocate()
    }

    var bytesUsed: Int {
        slots.bytesUsed + states.bytesUsed + owed.bytesUsed + attempts.bytesUsed + walk.members.bytesUsed
            + walk.hashes.bytesUsed
    }
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

    /// The top bit marks a wave's broadcast; the channel bits then name its lane, the wave bits its wave.
    static let broadcastBit: UInt64 = 1 << 63

    static func broadcast(channel: Int, wave: Int) -> UInt64 {
        broadcastBit | UInt64(wave) << 48 | UInt64(channel) << 32
    }

    static func isBroadcast(_ cookie: UInt64) -> Bool { cookie & broadcastBit != 0 }
    static func broadcastChannel(_ cookie: UInt64) -> Int { Int(cookie >> 32 & 0x7FFF) }

    static func member(_ cookie: UInt64) -> MemberRef { MemberRef(raw: cookie) }
    static func wave(_ cookie: UInt64) -> Int { Int(cookie >> 48 & 0x7FFF) }
}

/// Channel sets interned to 4 bytes per token: most tokens of a match share one set. Channel ids are the
/// engine's (see `ChannelDirectory`). A set lives while token slots use it (`retain` / `release`), and a freed
/// id is reused, so the table holds the sets in use, not every combination ever registered.
struct ChannelSets {
    private var sets: [[UInt16]] = [[]]
    private var users: [Int] = [1]  // set 0, the empty set, is never freed
    private var ids: [[UInt16]: UInt32] = [[]: 0]
    private var freeIDs: [UInt32] = []
    /// Channel id → the id of the set of just that channel + 1 (0: none): most tokens follow one channel.
    private var single: [UInt32] = []

    /// The set of `channels` (any order; a channel named twice counts once), counted as used once more.
    mutating func retain(_ channels: [UInt16]) -> UInt32 {
        let id: UInt32
        if channels.count == 1, Int(channels[0]) < single.count, single[Int(channels[0])] != 0 {
            id = single[Int(channels[0])] - 1
        } else {
            var sorted = channels.sorted()
            // A registration naming a channel twice must not make the token a member twice.
            var kept = min(1, sorted.count)
            for index in sorted.indices.dropFirst() where sorted[index] != sorted[kept - 1] {
                sorted[kept] = sorted[index]
                kept += 1
            }
            sorted.removeLast(sorted.count - kept)
            if let known = ids[sorted] {
                id = known
            } else {
                if let free = freeIDs.popLast() {
                    id = free
                    sets[Int(id)] = sorted
                    users[Int(id)] = 0
                } else {
                    id = UInt32(sets.count)
                    sets.append(sorted)
                    users.append(0)
                }
                ids[sorted] = id
                if sorted.count == 1 {
                    let channel = Int(sorted[0])
                    if channel >= single.count { single += Array(repeating: 0, count: channel + 1 - single.count) }
                    single[channel] = id + 1
                }
            }
        }
        users[Int(id)] += 1
        return id
    }

    /// A token slot stopped using set `id`.
    mutating func release(_ id: UInt32) {
        guard id != 0 else { return }
        users[Int(id)] -= 1
        assert(users[Int(id)] >= 0)
        guard users[Int(id)] == 0 else { return }
        let channels = sets[Int(id)]
        ids[channels] = nil
        if channels.count == 1 { single[Int(channels[0])] = 0 }
        sets[Int(id)] = []
        freeIDs.append(id)
    }

    subscript(id: UInt32) -> [UInt16] { sets[Int(id)] }

    /// Sets in use (tests check the table stays bounded under churn).
    var liveCount: Int { ids.count }
}

import FanfareCore

/// One shard's progress in one wave, as `WaveStore` keeps it (opaque bytes there; encoded here).
///
/// Cursors and counters, not per-token receipts: the counters of the members settled so far, where the
/// wave's key range still to visit starts and ends (`WalkKey`s), how far past that start pushes may have gone
/// out (the permit's high-water), and the few visited members still unsettled (in flight, waiting for a retry,
/// owed), by token hash.
struct ShardCheckpoint: Equatable {
    struct Counters: Equatable {
        var targeted = 0
        var sent = 0
        var delivered = 0
        var failed = 0
        var superseded = 0
        var downgraded = 0
        var expired = 0
        var invalidated = 0
        var retried = 0
        var possibleDuplicates = 0
        var resentAfterRestart = 0

        var accounted: Int { delivered + failed + superseded + expired + invalidated }
    }

    struct Pending: Equatable {
        var hash: UInt64
        var possiblySent: Bool
    }

    /// The wave's broadcast, in the checkpoints of the shard that sends it (version 2).
    struct Broadcast: Equatable {
        /// `BroadcastOutcome` raw value.
        var outcome: UInt8
        var reason: String?
        var requests: Int
        /// `PushPriority` raw value of the last request (0: none).
        var priority: Int
        var downgraded: Bool
        var resent: Bool
        /// A request may have reached APNs: a resumed wave that sends it again counts a possible duplicate.
        var possiblySent: Bool
    }

    /// Every member this shard targeted has its outcome.
    var finished = false
    /// A newer wave took this audience over on this shard: what is left ends superseded.
    var superseded = false
    /// Every member of the range was visited (`from`, `to` and `highWater` say nothing).
    var rangeDone = false
    var restarts = 0
    var counters = Counters()
    /// Failed outcomes by reason name.
    var failures: [String: Int] = [:]
    /// ns from the publish to the first and last answer (0 = none).
    var firstAck: UInt64 = 0
    var lastAck: UInt64 = 0
    var from = WalkKey.origin
    var to = WalkKey.origin
    /// Members of the range before this key may have been sent; nil: all of it may have.
    var highWater: WalkKey?
    var pending: [Pending] = []
    var broadcast: Broadcast?

    /// 1: no broadcast; 2: a broadcast block follows the pending members.
    static let version: UInt8 = 1
    static let broadcastVersion: UInt8 = 2

    // MARK: - Encoding

    func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128 + pending.count * 9)
        out.append(broadcast == nil ? Self.version : Self.broadcastVersion)
        out.append((finished ? 1 : 0) | (superseded ? 2 : 0) | (rangeDone ? 4 : 0) | (highWater == nil ? 8 : 0))
        for value in [
            restarts, counters.targeted, counters.sent, counters.delivered, counters.failed, counters.superseded,
            counters.downgraded, counters.expired, counters.invalidated, counters.retried, counters.possibleDuplicates,
            counters.resentAfterRestart,
        ] {
            Self.put(UInt64(clamping: value), &out)
        }
        Self.put(firstAck, &out)
        Self.put(lastAck, &out)
        Self.put(UInt64(failures.count), &out)
        for (name, count) in failures.sorted(by: { $0.key < $1.key }) {
            let bytes = Array(name.utf8.prefix(255))
            out.append(UInt8(bytes.count))
            out.append(contentsOf: bytes)
            Self.put(UInt64(clamping: count), &out)
        }
        Self.put(from, &out)
        Self.put(to, &out)
        Self.put(highWater ?? .origin, &out)
        Self.put(UInt64(pending.count), &out)
        for item in pending {
            Self.put(item.hash, &out)
            out.append(item.possiblySent ? 1 : 0)
        }
        if let broadcast {
            out.append(broadcast.outcome)
            out.append((broadcast.downgraded ? 1 : 0) | (broadcast.resent ? 2 : 0) | (broadcast.possiblySent ? 4 : 0))
            Self.put(UInt64(clamping: broadcast.requests), &out)
            Self.put(UInt64(clamping: broadcast.priority), &out)
            let reason = Array((broadcast.reason ?? "").utf8.prefix(255))
            out.append(UInt8(reason.count))
            out.append(contentsOf: reason)
        }
        return out
    }

    private static func put(_ value: UInt64, _ out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }

    private static func put(_ key: WalkKey, _ out: inout [UInt8]) {
        put(key.hash, &out)
        guard let token = key.token else {
            out.append(0)
            return
        }
        out.append(UInt8(token.byteCount))
        token.withUnsafeBytes { out.append(contentsOf: $0) }
    }

    // MARK: - Decoding (the bytes come from a file: every check is an error, never a trap)

    struct DecodingError: Error, CustomStringConvertible {
        var problem: String
        var description: String { "checkpoint: \(problem)" }
    }

    init() {}

    init(decoding bytes: [UInt8]) throws(DecodingError) {
        var reader = Reader(bytes: bytes)
        let version = try reader.byte()
        guard version == Self.version || version == Self.broadcastVersion else {
            throw DecodingError(
                problem: "version \(version), this engine reads \(Self.version) and \(Self.broadcastVersion)")
        }
        let flags = try reader.byte()
        finished = flags & 1 != 0
        superseded = flags & 2 != 0
        rangeDone = flags & 4 != 0
        let allPossiblySent = flags & 8 != 0
        restarts = try reader.count()
        counters.targeted = try reader.count()
        counters.sent = try reader.count()
        counters.delivered = try reader.count()
        counters.failed = try reader.count()
        counters.superseded = try reader.count()
        counters.downgraded = try reader.count()
        counters.expired = try reader.count()
        counters.invalidated = try reader.count()
        counters.retried = try reader.count()
        counters.possibleDuplicates = try reader.count()
        counters.resentAfterRestart = try reader.count()
        firstAck = try reader.word()
        lastAck = try reader.word()
        let failureCount = try reader.count(limit: 1024)
        for _ in 0..<failureCount {
            let length = Int(try reader.byte())
            let name = String(decoding: try reader.bytes(length), as: UTF8.self)
            failures[name, default: 0] += try reader.count()
        }
        from = try reader.key()
        to = try reader.key()
        let high = try reader.key()
        highWater = allPossiblySent ? nil : high
        let pendingCount = try reader.count(limit: bytes.count / 9 + 1)
        pending.reserveCapacity(pendingCount)
        for _ in 0..<pendingCount {
            let hash = try reader.word()
            pending.append(Pending(hash: hash, possiblySent: try reader.byte() != 0))
        }
        if version == Self.broadcastVersion {
            let outcome = try reader.byte()
            guard BroadcastOutcome(rawValue: outcome) != nil else {
                throw DecodingError(problem: "broadcast outcome \(outcome)")
            }
            let flags = try reader.byte()
            let requests = try reader.count()
            let priority = try reader.count(limit: 10)
            let length = Int(try reader.byte())
            let reason = String(decoding: try reader.bytes(length), as: UTF8.self)
            broadcast = Broadcast(
                outcome: outcome, reason: reason.isEmpty ? nil : reason, requests: requests, priority: priority,
                downgraded: flags & 1 != 0, resent: flags & 2 != 0, possiblySent: flags & 4 != 0)
        }
        guard reader.offset == bytes.count else {
            throw DecodingError(problem: "\(bytes.count - reader.offset) bytes after the end")
        }
        guard counters.accounted <= counters.targeted else {
            throw DecodingError(problem: "\(counters.accounted) outcomes for \(counters.targeted) targeted")
        }
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        mutating func byte() throws(DecodingError) -> UInt8 {
            guard offset < bytes.count else { throw DecodingError(problem: "cut short at byte \(offset)") }
            offset += 1
            return bytes[offset - 1]
        }

        mutating func word() throws(DecodingError) -> UInt64 {
            guard bytes.count - offset >= 8 else { throw DecodingError(problem: "cut short at byte \(offset)") }
            var value: UInt64 = 0
            for index in offset..<offset + 8 { value = value << 8 | UInt64(bytes[index]) }
            offset += 8
            return value
        }

        /// A count or counter: at most `limit` (counters: what an Int holds on any platform we run on).
        mutating func count(limit: Int = 1 << 48) throws(DecodingError) -> Int {
            let value = try word()
            guard value <= UInt64(limit) else {
                throw DecodingError(problem: "value \(value) at byte \(offset - 8) is out of range")
            }
            return Int(value)
        }

        mutating func bytes(_ count: Int) throws(DecodingError) -> ArraySlice<UInt8> {
            guard bytes.count - offset >= count else { throw DecodingError(problem: "cut short at byte \(offset)") }
            offset += count
            return bytes[offset - count..<offset]
        }

        mutating func key() throws(DecodingError) -> WalkKey {
            let hash = try word()
            let length = Int(try byte())
            guard length > 0 else { return WalkKey(hash: hash, token: nil) }
            let raw = try bytes(length)
            let token: DeviceToken
            do {
                token = try DeviceToken(bytes: raw)
            } catch {
                throw DecodingError(problem: "a key's token of \(length) bytes: \(error)")
            }
            return WalkKey(hash: hash, token: token)
        }
    }
}

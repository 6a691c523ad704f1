import FanfareCore
import FanfareTLS

/// An encoded push body, immutable and shared: a broadcast is encoded once and every stream sends these bytes.
public final class PushPayload: @unchecked Sendable {
    public let bytes: UnsafeRawBufferPointer

    /// Copies `bytes`; throws if they exceed `limit` (APNs rejects larger bodies with 413).
    public init(copying source: UnsafeRawBufferPointer, limit: Int = PayloadLimits.liveActivity) throws(PayloadError) {
        guard source.count <= limit else { throw .tooLarge(bytes: source.count, limit: limit) }
        guard source.count > 0 else { throw .invalid("the payload is empty") }
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: source.count, alignment: 16)
        storage.copyMemory(from: source)
        bytes = UnsafeRawBufferPointer(storage)
    }

    /// Takes JSON text as it is (the caller vouches for it; use the Live Activity encoder to build one).
    public init(_ json: String, limit: Int = PayloadLimits.liveActivity) throws(PayloadError) {
        let utf8 = Array(json.utf8)
        guard utf8.count <= limit else { throw .tooLarge(bytes: utf8.count, limit: limit) }
        guard !utf8.isEmpty else { throw .invalid("the payload is empty") }
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: utf8.count, alignment: 16)
        utf8.withUnsafeBytes { storage.copyMemory(from: $0) }
        bytes = UnsafeRawBufferPointer(storage)
    }

    /// Encodes a Live Activity payload (no Codable) and keeps the bytes.
    public convenience init(
        liveActivity content: LiveActivityContent, limit: Int = PayloadLimits.liveActivity
    ) throws(PayloadError) {
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: PayloadLimits.broadcast + 1, alignment: 16)
        defer { scratch.deallocate() }
        let count = try LiveActivityPayloadEncoder.encode(content, into: scratch, limit: limit)
        try self.init(copying: UnsafeRawBufferPointer(rebasing: scratch[0..<count]), limit: limit)
    }

    deinit { UnsafeMutableRawBufferPointer(mutating: bytes).deallocate() }

    public var count: Int { bytes.count }
}

/// Where a push goes: one activity's token (`POST /3/device/<hex>`) or an APNs broadcast channel (`POST
/// /4/broadcasts/apps/<bundle id>` with `apns-channel-id`, apns-spec.md §8.3), which reaches every device
/// subscribed to it.
///
/// Both ids are stored inline, so the enum is one byte larger than a `DeviceToken` alone (102 bytes): it fits
/// the padding the token left in `PushJob` and `PushResult`, and a token push costs what it did.
public enum PushTarget: Sendable, Equatable, CustomStringConvertible {
    case device(DeviceToken)
    case channel(BroadcastChannelID)

    /// A stable, well-mixed hash for picking a worker (a token's `shardHash`; for a channel, FNV-1a of its
    /// text through murmur3's finalizer).
    public var shardHash: UInt64 {
        switch self {
        case .device(let token): return token.shardHash
        case .channel(let channel):
            return channel.withUnsafeBytes { bytes in
                var hash: UInt64 = 0xcbf2_9ce4_8422_2325
                for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
                hash ^= hash >> 33
                hash &*= 0xFF51_AFD7_ED55_8CCD
                hash ^= hash >> 33
                return hash
            }
        }
    }

    public var description: String {
        switch self {
        case .device(let token): return "token \(token)"
        case .channel(let channel): return "channel \(channel)"
        }
    }

    /// What `token` reads on a broadcast: 32 zero bytes, a token no device has. Check `channel` first.
    public static let noDevice: DeviceToken = {
        guard let token = try? DeviceToken(bytes: repeatElement(UInt8(0), count: DeviceToken.minimumByteCount)) else {
            preconditionFailure("32 zero bytes are a well-formed token")
        }
        return token
    }()
}

/// One push to send: a token or a broadcast channel, shared payload bytes and the per-request header values.
public struct PushJob: Sendable {
    public var target: PushTarget
    public var payload: PushPayload
    public var priority: PushPriority
    /// `apns-expiration` in UNIX seconds; nil omits the header (APNs' default storage), 0 means "try once".
    /// A broadcast always sends it (0 when nil): APNs requires 0 on a channel that stores no message.
    public var expiration: Int64?
    /// `apns-collapse-id`, at most 64 bytes. Not sent on a broadcast (APNs documents none there).
    public var collapseID: String?
    /// `apns-id` (a broadcast's request id, sent as `ClientConfiguration.broadcastRequestIDHeader`); generated
    /// (random UUID, lowercase) when nil. A wave's pushes carry ``PushIdentifier/waveID(wave:token:)``, the
    /// same for every attempt.
    public var apnsID: PushIdentifier?
    /// The caller's handle for this push; comes back in its `PushResult`.
    public var cookie: UInt64
    /// Overrides the client's request timeout.
    public var timeout: Duration?
    /// When the push was meant to be sent (monotonic ns, `IOLoop.monotonicNanoseconds()`); latency is measured
    /// from here when set, so an open-loop load test is not fooled by its own stalls (coordinated omission).
    public var scheduledAt: UInt64?

    // Filled in by the client.
    var deadline: UInt64 = 0
    var submittedAt: UInt64 = 0
    var resends: Int = 0
    /// An earlier attempt went out unanswered and this is its resend (`resendUnconfirmed`).
    var possibleDuplicate = false

    public init(
        token: DeviceToken, payload: PushPayload, priority: PushPriority = .immediate, expiration: Int64? = nil,
        collapseID: String? = nil, apnsID: PushIdentifier? = nil, cookie: UInt64 = 0, timeout: Duration? = nil
    ) {
        self.target = .device(token)
        self.payload = payload
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.cookie = cookie
        self.timeout = timeout
    }

    /// A broadcast on `channel` (apns-spec.md §8.3): `update` and `end` payloads only (a broadcast cannot
    /// start an activity), at most ``PayloadLimits/broadcast`` bytes, priority 5 or 10 (`APNsClient.submit`
    /// refuses 1), `apns-expiration` always sent (it must be 0 on a channel with storage policy 0).
    public init(
        channel: BroadcastChannelID, payload: PushPayload, priority: PushPriority, expiration: Int64 = 0,
        apnsID: PushIdentifier? = nil, cookie: UInt64 = 0, timeout: Duration? = nil
    ) {
        self.target = .channel(channel)
        self.payload = payload
        self.priority = priority
        self.expiration = expiration
        self.collapseID = nil
        self.apnsID = apnsID
        self.cookie = cookie
        self.timeout = timeout
    }

    /// The device token; ``PushTarget/noDevice`` for a broadcast (check `channel`).
    public var token: DeviceToken {
        get {
            if case .device(let token) = target { return token }
            return PushTarget.noDevice
        }
        set { target = .device(newValue) }
    }

    /// The broadcast channel, nil for a token push.
    public var channel: BroadcastChannelID? {
        if case .channel(let channel) = target { return channel }
        return nil
    }

    /// Why the client would refuse this push before sending it (nil: it may be sent). Only broadcasts have
    /// rules of their own here; a token push goes as given and APNs judges it.
    public var localProblem: String? {
        guard case .channel = target else { return nil }
        if priority == .powerSaving {
            return "a broadcast's apns-priority must be 5 or 10, not 1 (APNs answers BadPriority)"
        }
        if payload.count > PayloadLimits.broadcast {
            return
                "a broadcast payload of \(payload.count) bytes exceeds APNs' \(PayloadLimits.broadcast)-byte limit (PayloadTooLarge)"
        }
        return nil
    }
}

/// An `apns-id`: a UUID in canonical lowercase text, stored inline (36 bytes, no heap).
public struct PushIdentifier: Sendable, Equatable, CustomStringConvertible {
    public static let byteCount = 36
    var storage: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)

    /// An empty identifier (no apns-id yet).
    public init() {}

    /// The `apns-id` of `token`'s push in wave `wave`: a version-5 (name-based, SHA-1) UUID, RFC 9562 §5.5, so a
    /// push resent after a restart carries the same id as its first attempt, in APNs' logs and the simulator's.
    ///
    /// Namespace ``NameBasedUUID/waveNamespace`` (314bf00d-1ac8-5df6-b187-865dac19318b); name the wave id as 8
    /// bytes big-endian, then the token's raw bytes. To recompute an id from a log line, in Python:
    /// `uuid.UUID(bytes=hashlib.sha1(uuid.UUID("314bf00d-1ac8-5df6-b187-865dac19318b").bytes
    /// + wave.to_bytes(8, "big") + bytes.fromhex(token)).digest()[:16], version=5)`.
    /// No allocation, lock or syscall: two or three SHA-1 blocks through OpenSSL (`Digest.sha1`, SHA-NI where the
    /// CPU has it); the same id as FanfareCore's pure-Swift `NameBasedUUID(wave:token:)` (docs/performance.md has
    /// the time per id of both).
    public static func waveID(wave: UInt64, token: DeviceToken) -> PushIdentifier {
        let namespace = NameBasedUUID.waveNamespace
        var prefix: (UInt64, UInt64, UInt64) = (namespace.high.bigEndian, namespace.low.bigEndian, wave.bigEndian)
        let digest = Swift.withUnsafeBytes(of: &prefix) { prefix in token.withUnsafeBytes { Digest.sha1(prefix, $0) } }
        let uuid = NameBasedUUID(digest: digest)
        var identifier = PushIdentifier()
        identifier.withUnsafeMutableBytes { uuid.write(to: $0.baseAddress!) }
        return identifier
    }

    /// Parses a canonical 8-4-4-4-12 UUID; stored lowercase.
    public init?(_ text: String) {
        var utf8 = Array(text.utf8)
        guard utf8.count == Self.byteCount else { return nil }
        let valid = utf8.withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) }
        guard valid else { return nil }
        for index in utf8.indices where utf8[index] >= 0x41 && utf8[index] <= 0x46 { utf8[index] += 0x20 }
        utf8.withUnsafeBytes { source in withUnsafeMutableBytes { $0.copyMemory(from: source) } }
    }

    /// ASCII `A-F` to `a-f` (the canonical form).
    mutating func lowercase() {
        withUnsafeMutableBytes { bytes in
            for index in bytes.indices where bytes[index] >= 0x41 && bytes[index] <= 0x46 { bytes[index] += 0x20 }
        }
    }

    mutating func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) -> R) -> R {
        Swift.withUnsafeMutableBytes(of: &storage) {
            body(UnsafeMutableRawBufferPointer(rebasing: $0[0..<Self.byteCount]))
        }
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        Swift.withUnsafeBytes(of: storage) { body(UnsafeRawBufferPointer(rebasing: $0[0..<Self.byteCount])) }
    }

    public var description: String {
        withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    public static func == (lhs: PushIdentifier, rhs: PushIdentifier) -> Bool {
        lhs.storage.0 == rhs.storage.0 && lhs.storage.1 == rhs.storage.1 && lhs.storage.2 == rhs.storage.2
            && lhs.storage.3 == rhs.storage.3 && lhs.storage.4 == rhs.storage.4
    }
}

/// Version-5 (name-based, SHA-1) UUIDs, RFC 9562 §5.5: the first 16 bytes of SHA-1(namespace ‖ name) with the
/// version nibble set to 5 and the variant bits to 10. The same namespace and name always give the same UUID.
///
/// A UUID is held as two halves, `high` (bytes 0–7) and `low` (bytes 8–15), each read big-endian.
public struct NameBasedUUID: Sendable, Equatable {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// RFC 9562 §6.6's namespace for domain names, 6ba7b810-9dad-11d1-80b4-00c04fd430c8.
    public static let dnsNamespace = NameBasedUUID(high: 0x6BA7_B810_9DAD_11D1, low: 0x80B4_00C0_4FD4_30C8)
    /// RFC 9562 §6.6's namespace for URLs, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
    public static let urlNamespace = NameBasedUUID(high: 0x6BA7_B811_9DAD_11D1, low: 0x80B4_00C0_4FD4_30C8)

    /// The namespace of wave pushes' ids, 314bf00d-1ac8-5df6-b187-865dac19318b: itself the version-5 UUID of the
    /// URL `https://github.com/fanfare/apns-id/wave` in ``urlNamespace`` (Python:
    /// `uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/fanfare/apns-id/wave")`). Fixed forever: another
    /// namespace would give a push resent by a newer version a different id from its first attempt.
    public static let waveNamespace = NameBasedUUID(high: 0x314B_F00D_1AC8_5DF6, low: 0xB187_865D_AC19_318B)

    /// The id of `token`'s push in wave `wave`: the name is the wave id as 8 bytes big-endian, then the token's
    /// raw bytes, in ``waveNamespace``. Python, to recompute one from a log line:
    /// `uuid.UUID(bytes=hashlib.sha1(ns.bytes + wave.to_bytes(8, "big") + bytes.fromhex(token)).digest()[:16],
    /// version=5)` with `ns = uuid.UUID("314bf00d-1ac8-5df6-b187-865dac19318b")`. No allocation.
    public init(wave: UInt64, token: DeviceToken) {
        var hasher = Self.hasher(namespace: Self.waveNamespace)
        hasher.update(bigEndian: wave)
        token.withUnsafeBytes { hasher.update($0) }
        self.init(finishing: hasher)
    }

    /// The id of wave `wave`'s broadcast on `channel` (iOS 18 broadcast channels): the name is the wave id as 8
    /// bytes big-endian, then the channel id's base64 text, in ``waveNamespace``. A broadcast sent again after a
    /// restart carries the same id.
    public init(wave: UInt64, channel: BroadcastChannelID) {
        var hasher = Self.hasher(namespace: Self.waveNamespace)
        hasher.update(bigEndian: wave)
        channel.withUnsafeBytes { hasher.update($0) }
        self.init(finishing: hasher)
    }

    /// A hasher that has taken `namespace`'s 16 bytes: append the name with `update`, then pass it to
    /// ``init(finishing:)``.
    public static func hasher(namespace: NameBasedUUID) -> SHA1 {
        var hasher = SHA1()
        hasher.update(bigEndian: namespace.high)
        hasher.update(bigEndian: namespace.low)
        return hasher
    }

    /// The UUID of the namespace and name `hasher` has taken (see ``hasher(namespace:)``).
    public init(finishing hasher: consuming SHA1) {
        self.init(digest: hasher.finalize())
    }

    /// The version-5 UUID made of `digest`'s first 16 bytes.
    public init(digest: SHA1.Digest) {
        let high = UInt64(digest.words.0) << 32 | UInt64(digest.words.1)
        let low = UInt64(digest.words.2) << 32 | UInt64(digest.words.3)
        self.init(high: high & ~0xF000 | 0x5000, low: low & ~(0xC0 << 56) | (0x80 << 56))
    }

    /// The UUID of `name` (any bytes) in `namespace`.
    public init(namespace: NameBasedUUID, name: UnsafeRawBufferPointer) {
        var hasher = Self.hasher(namespace: namespace)
        hasher.update(name)
        self.init(finishing: hasher)
    }

    /// The version nibble (5 for a name-based UUID made here).
    public var version: Int { Int(high >> 12 & 0xF) }

    /// Writes the canonical lowercase 8-4-4-4-12 text, exactly 36 bytes, to `destination`.
    public func write(to destination: UnsafeMutableRawPointer) {
        APNsIDGenerator.writeCanonical(high: high, low: low, to: destination)
    }

    /// The canonical lowercase text. Allocates.
    public var text: String {
        String(unsafeUninitializedCapacity: APNsIDGenerator.byteCount) { buffer in
            write(to: UnsafeMutableRawPointer(buffer.baseAddress!))
            return APNsIDGenerator.byteCount
        }
    }
}

/// A device, Live Activity update or push-to-start token: the raw bytes the app received.
///
/// Tokens are variable length (apns-spec §5: 32 bytes for classic device tokens, 80 bytes observed for
/// Live Activity tokens), so this accepts ``minimumByteCount``...``maximumByteCount`` bytes. The bytes
/// live inline (no heap allocation per token); bytes past ``byteCount`` are always zero.
public struct DeviceToken: Hashable, Sendable, CustomStringConvertible {
    public static let minimumByteCount = 32
    public static let maximumByteCount = 100

    @usableFromInline var storage: InlineArray<100, UInt8>
    @usableFromInline var length: UInt8

    /// Parses hex digits (either case). No separators, spaces or `<>` are accepted.
    @inlinable
    public init(hex: some StringProtocol) throws(DeviceTokenError) {
        // Native strings are contiguous UTF-8: decoded from the buffer, not through the view's iterator (which cost
        // a bulk registration as much as its JSON decoding).
        let contiguous: Result<DeviceToken, DeviceTokenError>? = hex.utf8.withContiguousStorageIfAvailable { utf8 in
            Result { () throws(DeviceTokenError) in try DeviceToken(hexUTF8: UnsafeRawBufferPointer(utf8)) }
        }
        if let contiguous {
            self = try contiguous.get()
            return
        }
        var storage = InlineArray<100, UInt8>(repeating: 0)
        let (hexCount, invalidOffset) = DeviceToken.decodeHex(hex.utf8, into: &storage)
        if let invalidOffset { throw DeviceToken.invalidCharacter(in: hex, utf8Offset: invalidOffset) }
        try self.init(storage: storage, hexCount: hexCount)
    }

    /// Parses hex digits given as UTF-8 bytes (e.g. the `:path` suffix straight from an HTTP/2
    /// header), without making a `String`.
    @inlinable
    public init(hexUTF8 utf8: UnsafeRawBufferPointer) throws(DeviceTokenError) {
        var storage = InlineArray<100, UInt8>(repeating: 0)
        let (hexCount, invalidOffset) = DeviceToken.decodeHex(utf8, into: &storage)
        if let invalidOffset { throw DeviceToken.invalidCharacter(inUTF8: utf8, offset: invalidOffset) }
        try self.init(storage: storage, hexCount: hexCount)
    }

    /// Checks the digit count of decoded hex; the order of checks decides which error is reported.
    @inlinable
    init(storage: InlineArray<100, UInt8>, hexCount: Int) throws(DeviceTokenError) {
        guard hexCount > 0 else { throw .empty }
        guard hexCount & 1 == 0 else { throw .oddLength(hexCount) }
        let byteCount = hexCount >> 1
        guard byteCount >= Self.minimumByteCount else { throw .tooShort(bytes: byteCount) }
        guard byteCount <= Self.maximumByteCount else { throw .tooLong(bytes: byteCount) }
        self.storage = storage
        self.length = UInt8(byteCount)
    }

    /// Decodes hex digits into `storage` (up to its 100 bytes). Returns how many digits there are and
    /// the offset of the first non-hex byte, if any. Keeps counting past the maximum so the error
    /// reports the real length.
    @inlinable
    static func decodeHex(
        _ utf8: some Sequence<UInt8>, into storage: inout InlineArray<100, UInt8>
    )
        -> (hexCount: Int, invalidOffset: Int?)
    {
        var hexCount = 0
        var highNibble: UInt8 = 0
        for character in utf8 {
            guard let nibble = DeviceToken.nibble(character) else { return (hexCount, hexCount) }
            if hexCount < 2 * Self.maximumByteCount {
                if hexCount & 1 == 0 {
                    highNibble = nibble
                } else {
                    storage[hexCount >> 1] = highNibble << 4 | nibble
                }
            }
            hexCount += 1
        }
        return (hexCount, nil)
    }

    /// Wraps raw token bytes.
    @inlinable
    public init(bytes: some Collection<UInt8>) throws(DeviceTokenError) {
        let byteCount = bytes.count
        guard byteCount > 0 else { throw .empty }
        guard byteCount >= Self.minimumByteCount else { throw .tooShort(bytes: byteCount) }
        guard byteCount <= Self.maximumByteCount else { throw .tooLong(bytes: byteCount) }
        var storage = InlineArray<100, UInt8>(repeating: 0)
        // Contiguous bytes (the fan-out's token table, every wave push) are one copy, not a checked store each.
        let copied: Bool? = bytes.withContiguousStorageIfAvailable { source in
            withUnsafeMutableBytes(of: &storage) { destination in
                destination.baseAddress!.copyMemory(from: source.baseAddress!, byteCount: byteCount)
            }
            return true
        }
        if copied == nil {
            var index = 0
            for byte in bytes {
                storage[index] = byte
                index += 1
            }
            assert(index == byteCount)
        }
        self.storage = storage
        self.length = UInt8(byteCount)
    }

    @inlinable public var byteCount: Int { Int(length) }

    /// Length of the hex form (the `:path` suffix).
    @inlinable public var hexCount: Int { Int(length) << 1 }

    @inlinable
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let used = Int(length)
        return try storage.span.withUnsafeBytes { all in
            try body(UnsafeRawBufferPointer(rebasing: all[0..<used]))
        }
    }

    /// Writes the lowercase hex form (``hexCount`` bytes) to `destination`; returns the count written.
    @inlinable
    @discardableResult
    public func writeLowercaseHex(to destination: UnsafeMutableRawPointer) -> Int {
        withUnsafeBytes { bytes in
            var out = 0
            for byte in bytes {
                destination.storeBytes(of: DeviceToken.hexDigit(byte >> 4), toByteOffset: out, as: UInt8.self)
                destination.storeBytes(of: DeviceToken.hexDigit(byte & 0x0F), toByteOffset: out + 1, as: UInt8.self)
                out += 2
            }
            assert(out == hexCount)
            return out
        }
    }

    /// The lowercase hex form. Allocates: use ``writeLowercaseHex(to:)`` on the hot path.
    public var hexString: String {
        String(unsafeUninitializedCapacity: hexCount) { buffer in
            writeLowercaseHex(to: UnsafeMutableRawPointer(buffer.baseAddress!))
        }
    }

    public var description: String { hexString }

    /// A well-mixed 64-bit hash for picking a shard (`hash & (shards - 1)`), stable across runs and
    /// processes (unlike `hashValue`). Folds the first 16 bytes only: token bytes are random, and every
    /// token has at least 32.
    @inlinable
    public var shardHash: UInt64 {
        withUnsafeBytes { bytes in
            let first = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self))
            let second = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            // murmur3's 64-bit finalizer, so low bits stay uniform even for non-random test tokens.
            var hash = first ^ (second &* 0x9E37_79B9_7F4A_7C15)
            hash ^= hash >> 33
            hash &*= 0xFF51_AFD7_ED55_8CCD
            hash ^= hash >> 33
            hash &*= 0xC4CE_B9FE_1A85_EC53
            hash ^= hash >> 33
            return hash
        }
    }

    @inlinable
    public static func == (lhs: DeviceToken, rhs: DeviceToken) -> Bool {
        guard lhs.length == rhs.length else { return false }
        return lhs.withUnsafeBytes { left in
            rhs.withUnsafeBytes { right in left.elementsEqual(right) }
        }
    }

    @inlinable
    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    @inlinable
    static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return character &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return character &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }

    @inlinable
    static func hexDigit(_ nibble: UInt8) -> UInt8 {
        assert(nibble < 16)
        return nibble < 10 ? nibble &+ UInt8(ascii: "0") : nibble &+ (UInt8(ascii: "a") &- 10)
    }

    /// Builds the error for the first non-hex byte of UTF-8 input; ill-formed UTF-8 shows as U+FFFD.
    @usableFromInline
    static func invalidCharacter(inUTF8 utf8: UnsafeRawBufferPointer, offset: Int) -> DeviceTokenError {
        let lead = utf8[offset]
        if lead < 0x80 { return .invalidCharacter(Character(Unicode.Scalar(lead)), offset: offset) }
        let length = UTF8Validation.multiByteSequenceLength(utf8, at: offset)
        guard length > 0 else { return .invalidCharacter("\u{FFFD}", offset: offset) }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: utf8[offset..<offset + length]), as: UTF8.self)
        return .invalidCharacter(Character(text.unicodeScalars.first!), offset: offset)
    }

    /// Builds the error for the first non-hex character. Every character before it was an ASCII hex
    /// digit, so its UTF-8 offset is also its character offset and a scalar boundary.
    @usableFromInline
    static func invalidCharacter(in hex: some StringProtocol, utf8Offset: Int) -> DeviceTokenError {
        let index = hex.utf8.index(hex.utf8.startIndex, offsetBy: utf8Offset)
        let scalar = hex.unicodeScalars[index]
        return .invalidCharacter(Character(scalar), offset: utf8Offset)
    }
}

/// Why a device token was rejected.
public enum DeviceTokenError: Error, Equatable, Sendable, CustomStringConvertible {
    case empty
    /// The hex string has this many digits; every byte needs two.
    case oddLength(Int)
    case invalidCharacter(Character, offset: Int)
    case tooShort(bytes: Int)
    case tooLong(bytes: Int)

    public var description: String {
        let expected =
            "expected \(DeviceToken.minimumByteCount) to \(DeviceToken.maximumByteCount) bytes "
            + "(\(2 * DeviceToken.minimumByteCount) to \(2 * DeviceToken.maximumByteCount) hex digits)"
        switch self {
        case .empty:
            return "device token is empty; \(expected)"
        case .oddLength(let digits):
            return "device token has an odd number of hex digits (\(digits)); each byte takes two digits"
        case .invalidCharacter(let character, let offset):
            return "device token has an invalid character \(Self.show(character)) at offset \(offset); "
                + "expected hex digits"
        case .tooShort(let bytes):
            return "device token is too short (\(bytes) bytes); \(expected)"
        case .tooLong(let bytes):
            return "device token is too long (\(bytes) bytes); \(expected)"
        }
    }

    /// `'g'` for visible characters; `U+000A` for whitespace and controls, which would not show.
    static func show(_ character: Character) -> String {
        let scalars = character.unicodeScalars
        if let scalar = scalars.first, scalars.count == 1,
            scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
        {
            let hex = String(scalar.value, radix: 16, uppercase: true)
            return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        }
        return "'\(character)'"
    }
}

/// Base64 with the URL and filename safe alphabet (RFC 4648 §5), without padding, as JWTs use it
/// (RFC 7515 §2).
public enum Base64URL {
    @usableFromInline
    static let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

    /// Length of the unpadded encoding of `byteCount` bytes.
    @inlinable
    public static func encodedCount(byteCount: Int) -> Int {
        precondition(byteCount >= 0)
        let remainder = byteCount % 3
        return (byteCount / 3) * 4 + (remainder == 0 ? 0 : remainder + 1)
    }

    /// Encodes without padding.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        let count = encodedCount(byteCount: input.count)
        return String(unsafeUninitializedCapacity: count) { buffer in
            input.withUnsafeBytes { encode($0, to: UnsafeMutableRawPointer(buffer.baseAddress!)) }
        }
    }

    /// Encodes `bytes` without padding into `destination` (``encodedCount(byteCount:)`` bytes, which it
    /// returns). Does not allocate.
    @discardableResult
    public static func encode(_ bytes: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int {
        let table = alphabet.utf8Start
        var out = 0
        func put(_ sextet: UInt32) {
            destination.storeBytes(of: table[Int(sextet & 0x3F)], toByteOffset: out, as: UInt8.self)
            out += 1
        }
        var index = 0
        while index + 3 <= bytes.count {
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            put(group >> 18)
            put(group >> 12)
            put(group >> 6)
            put(group)
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let group = UInt32(bytes[index]) << 16
            put(group >> 18)
            put(group >> 12)
        case 2:
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            put(group >> 18)
            put(group >> 12)
            put(group >> 6)
        default:
            break
        }
        assert(out == encodedCount(byteCount: bytes.count))
        return out
    }

    /// Decodes base64url. Padding is optional but must be correct if present. Returns nil for
    /// characters outside the URL alphabet (including `+` `/` and whitespace), an impossible length,
    /// or non-zero unused bits in the last character (a non-canonical encoding).
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var characters = Array(text.utf8)
        if characters.count % 4 == 0, characters.last == UInt8(ascii: "=") {
            characters.removeLast()
            if characters.last == UInt8(ascii: "=") { characters.removeLast() }
        }
        let remainder = characters.count % 4
        guard remainder != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(characters.count / 4 * 3 + 2)
        var group: UInt32 = 0
        var pending = 0
        for character in characters {
            guard let sextet = sextet(character) else { return nil }
            group = group << 6 | UInt32(sextet)
            pending += 1
            if pending == 4 {
                output.append(UInt8(truncatingIfNeeded: group >> 16))
                output.append(UInt8(truncatingIfNeeded: group >> 8))
                output.append(UInt8(truncatingIfNeeded: group))
                group = 0
                pending = 0
            }
        }
        switch pending {
        case 2:  // 12 bits: one byte + 4 unused bits
            guard group & 0x0F == 0 else { return nil }
            output.append(UInt8(truncatingIfNeeded: group >> 4))
        case 3:  // 18 bits: two bytes + 2 unused bits
            guard group & 0x03 == 0 else { return nil }
            output.append(UInt8(truncatingIfNeeded: group >> 10))
            output.append(UInt8(truncatingIfNeeded: group >> 2))
        default:
            assert(pending == 0)
        }
        return output
    }

    static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character &- UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character &- UInt8(ascii: "a") &+ 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character &- UInt8(ascii: "0") &+ 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return nil
        }
    }
}

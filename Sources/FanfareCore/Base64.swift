/// Base64 (RFC 4648), the one codec of the tree: the URL and filename safe alphabet without padding that JWT
/// segments use (§5, RFC 7515 §2), and the standard alphabet with padding of APNs' broadcast channel ids (§4).
/// The buffer forms do not allocate.
public enum Base64 {
    public enum Alphabet: Sendable {
        /// `A–Z a–z 0–9 + /` (RFC 4648 §4).
        case standard
        /// `A–Z a–z 0–9 - _` (RFC 4648 §5).
        case url
    }

    /// What decoding does with `=` padding.
    public enum Padding: Sendable {
        /// Optional, but correct if present: one or two `=` at the end of a multiple of 4 characters.
        case optional
        /// None allowed (JWT segments, RFC 7515 §2).
        case forbidden
    }

    @usableFromInline
    static let standardAlphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    @usableFromInline
    static let urlAlphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

    /// Length of the encoding of `byteCount` bytes.
    @inlinable
    public static func encodedCount(byteCount: Int, padded: Bool = false) -> Int {
        precondition(byteCount >= 0)
        let remainder = byteCount % 3
        if remainder == 0 { return byteCount / 3 * 4 }
        return byteCount / 3 * 4 + (padded ? 4 : remainder + 1)
    }

    /// Encodes `bytes` (URL alphabet, no padding unless asked).
    public static func encode(
        _ bytes: some Collection<UInt8>, alphabet: Alphabet = .url, padded: Bool = false
    )
        -> String
    {
        let input = Array(bytes)
        let count = encodedCount(byteCount: input.count, padded: padded)
        return String(unsafeUninitializedCapacity: count) { buffer in
            input.withUnsafeBytes {
                encode($0, to: UnsafeMutableRawPointer(buffer.baseAddress!), alphabet: alphabet, padded: padded)
            }
        }
    }

    /// Encodes the UTF-8 bytes of `text` (a JWT's header and claims).
    public static func encode(
        _ text: some StringProtocol, alphabet: Alphabet = .url, padded: Bool = false
    )
        -> String
    {
        encode(text.utf8, alphabet: alphabet, padded: padded)
    }

    /// Encodes `bytes` into `destination` (``encodedCount(byteCount:padded:)`` bytes, which it returns). Does
    /// not allocate.
    @discardableResult
    public static func encode(
        _ bytes: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer, alphabet: Alphabet = .url,
        padded: Bool = false
    ) -> Int {
        let table = alphabet == .url ? urlAlphabet.utf8Start : standardAlphabet.utf8Start
        var out = 0
        func put(_ sextet: UInt32) {
            destination.storeBytes(of: table[Int(sextet & 0x3F)], toByteOffset: out, as: UInt8.self)
            out += 1
        }
        func pad(_ count: Int) {
            guard padded else { return }
            for _ in 0..<count {
                destination.storeBytes(of: UInt8(ascii: "="), toByteOffset: out, as: UInt8.self)
                out += 1
            }
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
            pad(2)
        case 2:
            let group = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            put(group >> 18)
            put(group >> 12)
            put(group >> 6)
            pad(1)
        default:
            break
        }
        assert(out == encodedCount(byteCount: bytes.count, padded: padded))
        return out
    }

    /// Decodes `text`. Returns nil for a character outside `alphabet` (whitespace included), padding that
    /// `padding` does not allow, an impossible length, or (unless `canonicalOnly` is false) non-zero unused
    /// bits in the last character, which would let two texts decode to the same bytes (RFC 4648 §3.5).
    public static func decode(
        _ text: some StringProtocol, alphabet: Alphabet = .url, padding: Padding = .optional
    ) -> [UInt8]? {
        var text = String(text)
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0), alphabet: alphabet, padding: padding) }
    }

    /// ``decode(_:alphabet:padding:)`` of raw text.
    public static func decode(
        _ text: UnsafeRawBufferPointer, alphabet: Alphabet = .url, padding: Padding = .optional
    ) -> [UInt8]? {
        let capacity = decodedCapacity(encodedCount: text.count)
        var failed = false
        let bytes = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            let count = decode(text, into: UnsafeMutableRawBufferPointer(buffer), alphabet: alphabet, padding: padding)
            failed = count == nil
            initialized = count ?? 0
        }
        return failed ? nil : bytes
    }

    /// Room that decoding `encodedCount` characters needs at most.
    @inlinable
    public static func decodedCapacity(encodedCount: Int) -> Int {
        encodedCount / 4 * 3 + max(0, encodedCount % 4 - 1)
    }

    /// Decodes `text` into `output` without allocating; returns the byte count, or nil for what
    /// ``decode(_:alphabet:padding:)`` refuses and for too little room (``decodedCapacity(encodedCount:)``).
    public static func decode(
        _ text: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, alphabet: Alphabet = .url,
        padding: Padding = .optional, canonicalOnly: Bool = true
    ) -> Int? {
        var count = text.count
        if padding == .optional, count % 4 == 0, count > 0, text[count - 1] == UInt8(ascii: "=") {
            count -= text[count - 2] == UInt8(ascii: "=") ? 2 : 1
        }
        guard count % 4 != 1, decodedCapacity(encodedCount: count) <= output.count else { return nil }
        var group: UInt32 = 0
        var bits = 0
        var written = 0
        for index in 0..<count {
            guard let sextet = sextet(text[index], alphabet) else { return nil }
            group = group << 6 | UInt32(sextet)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output[written] = UInt8(truncatingIfNeeded: group >> UInt32(bits))
                written += 1
                group &= (1 << UInt32(bits)) - 1
            }
        }
        // The last character's unused bits (2 or 4) must be zero in the canonical encoding.
        if canonicalOnly && group != 0 { return nil }
        assert(written == decodedCapacity(encodedCount: count))
        return written
    }

    static func sextet(_ character: UInt8, _ alphabet: Alphabet) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character &- UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character &- UInt8(ascii: "a") &+ 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character &- UInt8(ascii: "0") &+ 52
        case UInt8(ascii: "-") where alphabet == .url, UInt8(ascii: "+") where alphabet == .standard: return 62
        case UInt8(ascii: "_") where alphabet == .url, UInt8(ascii: "/") where alphabet == .standard: return 63
        default: return nil
        }
    }
}

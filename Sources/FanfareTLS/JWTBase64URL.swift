// Base64url without padding (RFC 4648 §5, RFC 7515 §2): the encoding of every JWT segment.
// A private copy so FanfareTLS need not wait for FanfareCore's Base64URL; JWTs are control-plane
// data (minted every ~40 minutes), so returning String/[UInt8] is fine here.

enum JWTBase64URL {
    private static let alphabet: [UInt8] = Array(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8
    )

    /// Encodes `bytes` as unpadded base64url.
    static func encode(_ bytes: UnsafeRawBufferPointer) -> String {
        let fullGroups = bytes.count / 3
        let remainder = bytes.count % 3
        let outputCount = fullGroups * 4 + (remainder == 0 ? 0 : remainder + 1)
        let encoded = [UInt8](unsafeUninitializedCapacity: outputCount) { output, initialized in
            var out = 0
            var index = 0
            while index + 3 <= bytes.count {
                let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
                output[out] = alphabet[Int(word >> 18 & 63)]
                output[out + 1] = alphabet[Int(word >> 12 & 63)]
                output[out + 2] = alphabet[Int(word >> 6 & 63)]
                output[out + 3] = alphabet[Int(word & 63)]
                out += 4
                index += 3
            }
            if remainder == 1 {
                let word = UInt32(bytes[index]) << 16
                output[out] = alphabet[Int(word >> 18 & 63)]
                output[out + 1] = alphabet[Int(word >> 12 & 63)]
                out += 2
            } else if remainder == 2 {
                let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
                output[out] = alphabet[Int(word >> 18 & 63)]
                output[out + 1] = alphabet[Int(word >> 12 & 63)]
                output[out + 2] = alphabet[Int(word >> 6 & 63)]
                out += 3
            }
            assert(out == outputCount)
            initialized = out
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    static func encode(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { encode($0) }
    }

    static func encode(_ text: String) -> String {
        var text = text
        return text.withUTF8 { encode(UnsafeRawBufferPointer($0)) }
    }

    /// Decodes unpadded base64url; nil for any character outside the alphabet (including `=`),
    /// an impossible length, or non-zero bits left over in the last character (non-canonical input).
    static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        if text.count % 4 == 1 { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bitCount = 0
        for character in text {
            guard let value = sextet(character) else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bitCount += 6
            if bitCount >= 8 {
                bitCount -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bitCount)))
                accumulator &= (1 << UInt32(bitCount)) - 1
            }
        }
        // Leftover bits must be zero, otherwise two different strings would decode to the same bytes.
        if accumulator != 0 { return nil }
        return output
    }

    static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
    }

    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return nil
        }
    }
}

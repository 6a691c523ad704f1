/// The one UTF-8 well-formedness check of the tree (RFC 3629 §4): the JSON scanner and writer, device token
/// text and the simulator's accepted-push log use it.
package enum UTF8Validation {
    /// The length (2...4) of the well-formed multi-byte sequence that starts at `offset`, or 0 when the
    /// bytes there are not well-formed UTF-8 (stray continuation byte, overlong form, surrogate,
    /// code point above U+10FFFF, or a sequence cut off by the end of the buffer).
    ///
    /// Precondition: the byte at `offset` is ≥ 0x80 (ASCII is handled by the callers' fast paths).
    package static func multiByteSequenceLength(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> Int {
        assert(offset >= 0 && offset < bytes.count)
        let lead = bytes[offset]
        assert(lead >= 0x80)
        let remaining = bytes.count - offset
        // The second byte's allowed range depends on the lead byte; that is what rules out overlong
        // forms, UTF-16 surrogates (U+D800...U+DFFF) and code points above U+10FFFF.
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            secondHigh = 0x9F
        case 0xF0:
            length = 4
            secondLow = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            secondHigh = 0x8F
        default: return 0
        }
        guard remaining >= length else { return 0 }
        let second = bytes[offset + 1]
        guard second >= secondLow && second <= secondHigh else { return 0 }
        var index = 2
        while index < length {
            guard bytes[offset + index] & 0xC0 == 0x80 else { return 0 }
            index += 1
        }
        return length
    }
}

/// Finds the end of a run of bytes that JSON strings carry as-is: printable ASCII other than `"` and
/// `\`. Both the writer (escaping) and the scanner (strings) spend most of their time in such runs, so it
/// tests eight bytes per step (SWAR) and goes straight to the first special byte of a word.
enum PlainASCII {
    /// The offset of the first byte at or after `start` that is below 0x20, `"`, `\` or ≥ 0x80;
    /// `bytes.count` when there is none.
    @inline(__always)
    static func runEnd(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        assert(start >= 0 && start <= bytes.count)
        var index = start
        let count = bytes.count
        if let base = bytes.baseAddress {
            while index + 8 <= count {
                // Little-endian order: the word's first byte is its lowest.
                let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                let special = specialBytes(word)
                if special != 0 { return index + special.trailingZeroBitCount / 8 }
                index += 8
            }
        }
        while index < count && isPlain(bytes[index]) {
            index += 1
        }
        return index
    }

    @inline(__always)
    static func isPlain(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    /// True when any byte of `word` is not plain (byte order does not matter).
    @inline(__always)
    static func containsSpecialByte(_ word: UInt64) -> Bool {
        specialBytes(word) != 0
    }

    /// The high bit of each byte of `word` that is not plain may be set, and the lowest set bit always marks
    /// the lowest such byte: the "has a byte less than n" and "has a zero byte" tests of Bit Twiddling Hacks
    /// can only mark false bytes above a true one (a borrow comes only out of a byte that matched).
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        let control = (word &- ones &* 0x20) & ~word & highBits
        let quote = word ^ (ones &* 0x22)
        let quoteFound = (quote &- ones) & ~quote & highBits
        let backslash = word ^ (ones &* 0x5C)
        let backslashFound = (backslash &- ones) & ~backslash & highBits
        return control | quoteFound | backslashFound | (word & highBits)
    }
}

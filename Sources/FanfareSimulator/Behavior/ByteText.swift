import FanfareCore

// Byte-level text checks used on the per-request path: no String, no allocation.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension UnsafeRawBufferPointer {
    /// Whether these bytes are exactly the ASCII text `literal`.
    @inline(__always)
    func equals(_ literal: StaticString) -> Bool {
        // Multi-character literals are stored as UTF-8 pointers; a one-character literal may be stored as a
        // Unicode scalar, which only `withUTF8Buffer` can read.
        guard literal.hasPointerRepresentation else {
            return literal.withUTF8Buffer { UnsafeRawBufferPointer($0).equals(self) }
        }
        let length = literal.utf8CodeUnitCount
        guard length == count else { return false }
        return length == 0 || memcmp(baseAddress!, literal.utf8Start, length) == 0
    }

    /// Whether these bytes start with the ASCII text `literal`.
    @inline(__always)
    func hasPrefix(_ literal: StaticString) -> Bool {
        guard literal.hasPointerRepresentation else {
            return literal.withUTF8Buffer { text in
                text.count <= count && UnsafeRawBufferPointer(text).equals(self.slice(from: 0, count: text.count))
            }
        }
        let length = literal.utf8CodeUnitCount
        guard length <= count else { return false }
        return length == 0 || memcmp(baseAddress!, literal.utf8Start, length) == 0
    }

    /// Whether these bytes equal `other` byte for byte (memcmp: JWTs are compared on every request).
    @inline(__always)
    func equals(_ other: UnsafeRawBufferPointer) -> Bool {
        guard count == other.count else { return false }
        guard count > 0 else { return true }
        return memcmp(baseAddress!, other.baseAddress!, count) == 0
    }

    /// Whether these bytes equal `other[offset ..< offset + count]`.
    @inline(__always)
    func equals(_ other: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        guard offset >= 0, offset + count <= other.count else { return false }
        var index = 0
        while index < count {
            if self[index] != other[offset + index] { return false }
            index += 1
        }
        return true
    }

    /// A sub-range as a buffer of its own (no copy).
    @inline(__always)
    func slice(from start: Int, count length: Int) -> UnsafeRawBufferPointer {
        precondition(start >= 0 && length >= 0 && start + length <= count, "slice out of bounds")
        guard length > 0, let base = baseAddress else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: base + start, count: length)
    }

    /// The bytes from `start` to the end.
    @inline(__always)
    func suffix(from start: Int) -> UnsafeRawBufferPointer {
        slice(from: start, count: count - start)
    }
}

/// ASCII classification of single bytes.
enum ASCII {
    @inlinable
    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }

    /// `0-9 a-f A-F`, without branches on the byte's range.
    @inline(__always)
    static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte &- UInt8(ascii: "0")) < 10 || ((byte | 0x20) &- UInt8(ascii: "a")) < 6
    }

    @inlinable
    static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
    }

    @inlinable
    static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    @inlinable
    static func lowercased(_ byte: UInt8) -> UInt8 {
        (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) ? byte | 0x20 : byte
    }
}

/// Syntax checks for APNs header values.
enum HeaderSyntax {
    /// `8-4-4-4-12` hexadecimal digits. Apple documents lowercase; clients such as Foundation's
    /// `UUID().uuidString` send uppercase and APNs is reported to accept it, hence the switch.
    static func isCanonicalUUID(_ value: UnsafeRawBufferPointer, requireLowercase: Bool) -> Bool {
        APNsIDGenerator.isValidAPNsID(value, requireLowercase: requireLowercase)
    }

    /// A non-negative decimal integer that fits in `Int64` (no sign, no spaces, at least one digit).
    static func parseNonNegativeInteger(_ value: UnsafeRawBufferPointer) -> Int64? {
        guard value.count > 0, value.count <= 19 else { return nil }
        var result: Int64 = 0
        for byte in value {
            guard ASCII.isDigit(byte) else { return nil }
            let (multiplied, overflowA) = result.multipliedReportingOverflow(by: 10)
            let (added, overflowB) = multiplied.addingReportingOverflow(Int64(byte &- UInt8(ascii: "0")))
            if overflowA || overflowB { return nil }
            result = added
        }
        return result
    }

    /// A device token: hex digits (either case), even count, `minimumBytes...maximumBytes` decoded bytes.
    static func isDeviceToken(_ value: UnsafeRawBufferPointer, minimumBytes: Int, maximumBytes: Int) -> Bool {
        let digits = value.count
        guard digits % 2 == 0, digits >= 2 * minimumBytes, digits <= 2 * maximumBytes else { return false }
        return isHex(value)
    }

    /// All bytes are `0-9 a-f A-F`. Checks eight bytes per step (SWAR): tokens are up to 200 digits and
    /// this runs on every push.
    static func isHex(_ value: UnsafeRawBufferPointer) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        /// High bit of each byte set iff that byte is in `low...high` (valid for bytes below 0x80).
        @inline(__always) func inRange(_ word: UInt64, _ low: UInt8, _ high: UInt8) -> UInt64 {
            let atLeastLow = word &+ ones &* UInt64(0x80 - low)
            let aboveHigh = word &+ ones &* UInt64(0x7F - high)
            return atLeastLow & ~aboveHigh & highBits
        }
        var index = 0
        while index + 8 <= value.count {
            let word = value.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            guard word & highBits == 0 else { return false }
            let digit = inRange(word, UInt8(ascii: "0"), UInt8(ascii: "9"))
            let letter = inRange(word | 0x2020_2020_2020_2020, UInt8(ascii: "a"), UInt8(ascii: "f"))
            guard digit | letter == highBits else { return false }
            index += 8
        }
        while index < value.count {
            guard ASCII.isHexDigit(value[index]) else { return false }
            index += 1
        }
        return true
    }

    /// A bundle ID or topic: non-empty, only `A-Z a-z 0-9 . -` (Apple's bundle ID alphabet).
    static func isTopicSyntax(_ value: UnsafeRawBufferPointer) -> Bool {
        guard value.count > 0 else { return false }
        // Bit b of `allowedLow` / `allowedHigh` is set when byte b / b + 64 is allowed.
        let allowedLow: UInt64 = (1 << 0x2D) | (1 << 0x2E) | (0x3FF << 0x30)  // - . 0-9
        let allowedHigh: UInt64 = (0x3FF_FFFF << 1) | (0x3FF_FFFF << 33)  // A-Z a-z
        for byte in value {
            let allowed: Bool
            if byte < 64 {
                allowed = (allowedLow >> UInt64(byte)) & 1 == 1
            } else if byte < 128 {
                allowed = (allowedHigh >> UInt64(byte - 64)) & 1 == 1
            } else {
                allowed = false
            }
            guard allowed else { return false }
        }
        return true
    }

    /// Standard or URL-safe base64, with or without padding (channel IDs are base64; Apple says not to
    /// assume their size).
    static func isBase64(_ value: UnsafeRawBufferPointer) -> Bool {
        guard value.count > 0 else { return false }
        var padding = 0
        for byte in value {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"),
                UInt8(ascii: "-"), UInt8(ascii: "_"):
                if padding > 0 { return false }
            case UInt8(ascii: "="):
                padding += 1
                if padding > 2 { return false }
            default:
                return false
            }
        }
        return padding == 0 || value.count % 4 == 0
    }
}

/// Writes decimal integers into caller buffers.
enum DecimalWriter {
    /// Writes `value` in decimal at `offset`; returns the number of bytes written.
    /// The buffer must have room for 20 bytes after `offset`.
    @discardableResult
    static func write(_ value: Int64, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        precondition(offset >= 0 && offset + 20 <= buffer.count, "decimal needs up to 20 bytes")
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch, kept on the stack
        return withUnsafeMutableBytes(of: &digits) { scratch in
            var count = 0
            repeat {
                scratch[count] = UInt8(ascii: "0") &+ UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            var written = 0
            if value < 0 {
                buffer[offset] = UInt8(ascii: "-")
                written = 1
            }
            while count > 0 {
                count -= 1
                buffer[offset + written] = scratch[count]
                written += 1
            }
            return written
        }
    }
}

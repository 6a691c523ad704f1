/// The shape of a push body, as far as the simulator checks it.
public enum PayloadShape: Sendable, Equatable {
    /// A JSON object whose `aps` member is an object.
    case objectWithAPS
    /// Valid JSON, but not an object with an `aps` object.
    case missingAPS
    /// Not valid JSON (RFC 8259, UTF-8), or nested deeper than `JSONScanner.maximumDepth`.
    case malformed
}

/// A validating JSON scanner over raw bytes: no allocation, no Foundation, no recursion beyond
/// `maximumDepth`. It validates syntax and UTF-8 and locates top-level members; it builds no values.
struct JSONScanner {
    /// Nesting limit; deeper documents are treated as malformed (bounds the recursion on worker stacks).
    static let maximumDepth = 64

    private let bytes: UnsafeRawBufferPointer
    private var position = 0

    private init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// Whether `bytes` is exactly one JSON value (with optional surrounding whitespace).
    static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var scanner = JSONScanner(bytes)
        scanner.skipWhitespace()
        guard scanner.scanValue(depth: 0) else { return false }
        scanner.skipWhitespace()
        return scanner.position == bytes.count
    }

    /// Classifies a push body.
    static func payloadShape(_ bytes: UnsafeRawBufferPointer) -> PayloadShape {
        guard let member = topLevelMember(bytes, key: "aps") else { return .malformed }
        guard let range = member else { return .missingAPS }
        return bytes[range.lowerBound] == UInt8(ascii: "{") ? .objectWithAPS : .missingAPS
    }

    /// Validates `bytes` as a JSON document and finds a member of the top-level object.
    /// Returns nil when the document is invalid; `.some(nil)` when it is valid but not an object or has no
    /// such member; otherwise the byte range of the (first) member's value. Keys are compared as raw bytes
    /// (a key spelled with escapes does not match).
    static func topLevelMember(_ bytes: UnsafeRawBufferPointer, key: StaticString) -> Range<Int>?? {
        var scanner = JSONScanner(bytes)
        scanner.skipWhitespace()
        guard scanner.position < bytes.count else { return nil }
        guard bytes[scanner.position] == UInt8(ascii: "{") else {
            guard scanner.scanValue(depth: 0) else { return nil }
            scanner.skipWhitespace()
            return scanner.position == bytes.count ? .some(nil) : nil
        }
        var found: Range<Int>?
        guard scanner.scanObject(depth: 0, lookingFor: key, found: &found) else { return nil }
        scanner.skipWhitespace()
        guard scanner.position == bytes.count else { return nil }
        return .some(found)
    }

    /// Validates `bytes` as one JSON object and calls `visit` with each top-level member's raw key bytes
    /// (escapes not decoded) and value range, in order. nil when the document is not valid JSON; false when
    /// it is valid but not an object.
    static func forEachTopLevelMember(
        _ bytes: UnsafeRawBufferPointer, _ visit: (UnsafeRawBufferPointer, Range<Int>) -> Void
    ) -> Bool? {
        guard isValid(bytes) else { return nil }
        var scanner = JSONScanner(bytes)
        scanner.skipWhitespace()
        guard bytes[scanner.position] == UInt8(ascii: "{") else { return false }
        scanner.position += 1
        scanner.skipWhitespace()
        // Valid JSON, so the member syntax needs no more checks here.
        while bytes[scanner.position] != UInt8(ascii: "}") {
            let keyStart = scanner.position + 1
            _ = scanner.scanString()
            let key = bytes.slice(from: keyStart, count: scanner.position - 1 - keyStart)
            scanner.skipWhitespace()
            scanner.position += 1  // ':'
            scanner.skipWhitespace()
            let valueStart = scanner.position
            _ = scanner.scanValue(depth: 1)
            visit(key, valueStart..<scanner.position)
            scanner.skipWhitespace()
            if bytes[scanner.position] == UInt8(ascii: ",") {
                scanner.position += 1
                scanner.skipWhitespace()
            }
        }
        return true
    }

    /// Copies valid JSON without insignificant whitespace (so a payload fits on one log line).
    /// Returns the number of bytes written; the destination needs `source.count` bytes of room.
    static func writeMinified(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer, at offset: Int) -> Int {
        precondition(offset >= 0 && offset + source.count <= destination.count, "no room for the payload")
        var written = 0
        var inString = false
        var escaped = false
        for byte in source {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if isWhitespace(byte) {
                continue
            }
            destination[offset + written] = byte
            written += 1
        }
        return written
    }

    /// Length of the valid UTF-8 sequence starting at `index` (1...4), or nil if the bytes there are not
    /// well-formed UTF-8 (overlongs, surrogates and values above U+10FFFF are rejected).
    static func utf8SequenceLength(_ bytes: UnsafeRawBufferPointer, at index: Int) -> Int? {
        let lead = bytes[index]
        if lead < 0x80 { return 1 }
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F
        default: return nil
        }
        guard index + length <= bytes.count else { return nil }
        let second = bytes[index + 1]
        guard second >= low && second <= high else { return nil }
        var next = 2
        while next < length {
            let continuation = bytes[index + next]
            guard continuation >= 0x80 && continuation <= 0xBF else { return nil }
            next += 1
        }
        return length
    }

    // MARK: - Grammar

    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    private mutating func skipWhitespace() {
        while position < bytes.count, Self.isWhitespace(bytes[position]) { position += 1 }
    }

    private mutating func scanValue(depth: Int) -> Bool {
        guard position < bytes.count else { return false }
        switch bytes[position] {
        case UInt8(ascii: "{"):
            var ignored: Range<Int>?
            return scanObject(depth: depth, lookingFor: nil, found: &ignored)
        case UInt8(ascii: "["): return scanArray(depth: depth)
        case UInt8(ascii: "\""): return scanString()
        case UInt8(ascii: "t"): return scanLiteral("true")
        case UInt8(ascii: "f"): return scanLiteral("false")
        case UInt8(ascii: "n"): return scanLiteral("null")
        default: return scanNumber()
        }
    }

    /// Scans `{ ... }` starting at `{`. When `key` is given, records the value range of its first occurrence.
    private mutating func scanObject(depth: Int, lookingFor key: StaticString?, found: inout Range<Int>?) -> Bool {
        guard depth < Self.maximumDepth else { return false }
        assert(bytes[position] == UInt8(ascii: "{"))
        position += 1
        skipWhitespace()
        guard position < bytes.count else { return false }
        if bytes[position] == UInt8(ascii: "}") {
            position += 1
            return true
        }
        while true {
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return false }
            let keyStart = position + 1
            guard scanString() else { return false }
            let keyBytes = bytes.slice(from: keyStart, count: position - 1 - keyStart)
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { return false }
            position += 1
            skipWhitespace()
            let valueStart = position
            guard scanValue(depth: depth + 1) else { return false }
            if let key, found == nil, keyBytes.equals(key) { found = valueStart..<position }
            skipWhitespace()
            guard position < bytes.count else { return false }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                skipWhitespace()
                continue
            }
            guard bytes[position] == UInt8(ascii: "}") else { return false }
            position += 1
            return true
        }
    }

    private mutating func scanArray(depth: Int) -> Bool {
        guard depth < Self.maximumDepth else { return false }
        position += 1
        skipWhitespace()
        guard position < bytes.count else { return false }
        if bytes[position] == UInt8(ascii: "]") {
            position += 1
            return true
        }
        while true {
            guard scanValue(depth: depth + 1) else { return false }
            skipWhitespace()
            guard position < bytes.count else { return false }
            if bytes[position] == UInt8(ascii: ",") {
                position += 1
                skipWhitespace()
                continue
            }
            guard bytes[position] == UInt8(ascii: "]") else { return false }
            position += 1
            return true
        }
    }

    /// Scans `"..."` starting at the opening quote; leaves `position` after the closing quote.
    private mutating func scanString() -> Bool {
        var index = position + 1
        defer { position = index }
        let count = bytes.count
        while index < count {
            let byte = bytes[index]
            // Fast path: printable ASCII other than `"` and `\` (most of any payload).
            if byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                index += 1
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return true
            case UInt8(ascii: "\\"):
                index += 1
                guard index < count else { return false }
                switch bytes[index] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                    UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    index += 1
                case UInt8(ascii: "u"):
                    guard index + 4 < count else { return false }
                    for offset in 1...4 where !ASCII.isHexDigit(bytes[index + offset]) { return false }
                    index += 5
                default:
                    return false
                }
            case 0x00..<0x20:
                return false
            default:
                guard let length = Self.utf8SequenceLength(bytes, at: index) else { return false }
                index += length
            }
        }
        return false
    }

    private mutating func scanNumber() -> Bool {
        let start = position
        if position < bytes.count, bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, ASCII.isDigit(bytes[position]) else { return false }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, ASCII.isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            position += 1
            guard position < bytes.count, ASCII.isDigit(bytes[position]) else { return false }
            while position < bytes.count, ASCII.isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard position < bytes.count, ASCII.isDigit(bytes[position]) else { return false }
            while position < bytes.count, ASCII.isDigit(bytes[position]) { position += 1 }
        }
        return position > start
    }

    private mutating func scanLiteral(_ literal: StaticString) -> Bool {
        let length = literal.utf8CodeUnitCount
        guard position + length <= bytes.count, bytes.slice(from: position, count: length).equals(literal) else {
            return false
        }
        position += length
        return true
    }
}

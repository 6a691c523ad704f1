/// The one JSON reader of the tree: a cursor over JSON bytes (RFC 8259). Each `scan…` method consumes one
/// token or value and throws the first problem; nothing allocates, nothing recurses (the container stack is
/// one bit per level). Everything that reads JSON builds on it: ``JSONValidator``, the APNs error body, the
/// channel management answers, the simulator's request checks, JWT claims and the token batch fast path.
package struct JSONScanner {
    /// What the scanner accepts where RFC 8259 leaves a choice, and how deep containers may nest.
    package struct Rules: Sendable {
        /// Containers may nest this deep (the outermost counts); the next opening bracket is an error.
        package var maximumDepth: Int
        /// Whether `\uD800`...`\uDFFF` escapes must form high+low pairs. RFC 8259 §8.2 leaves lone ones to
        /// the implementation; ours refuses them except where a reader models a peer that takes them.
        package var pairsSurrogates: Bool

        package init(maximumDepth: Int, pairsSurrogates: Bool) {
            // The open containers are one bit each of a UInt64.
            precondition(maximumDepth >= 1 && maximumDepth <= 64, "JSONScanner: maximumDepth must be 1...64")
            self.maximumDepth = maximumDepth
            self.pairsSurrogates = pairsSurrogates
        }

        /// ``JSONValidator``'s rules: ``JSONValidator/maximumDepth``, surrogates paired.
        package static let strict = Rules(maximumDepth: JSONValidator.maximumDepth, pairsSurrogates: true)
    }

    package let bytes: UnsafeRawBufferPointer
    package var offset: Int = 0
    package let rules: Rules

    package init(_ bytes: UnsafeRawBufferPointer, rules: Rules = .strict) {
        self.bytes = bytes
        self.rules = rules
    }

    @inline(__always)
    package static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    package func peek() -> UInt8? {
        offset < bytes.count ? bytes[offset] : nil
    }

    package mutating func skipWhitespace() {
        while offset < bytes.count && Self.isWhitespace(bytes[offset]) {
            offset += 1
        }
    }

    package func fail(_ problem: JSONValidationError.Problem) -> JSONValidationError {
        JSONValidationError(offset: offset, problem: problem)
    }

    /// The error for "found something else (or nothing) where `expected` had to be".
    package func mismatch(_ expected: JSONValidationError.Expectation) -> JSONValidationError {
        if let byte = peek() {
            return fail(.unexpectedByte(byte, expected: expected))
        }
        return fail(.unexpectedEnd(expected: expected))
    }

    package mutating func expect(
        _ byte: UInt8, _ expected: JSONValidationError.Expectation
    )
        throws(JSONValidationError)
    {
        guard peek() == byte else { throw mismatch(expected) }
        offset += 1
    }

    /// Consumes the literal `word` (`true`, `false`, `null`) if it is next, after whitespace.
    package mutating func skipLiteral(_ word: StaticString) -> Bool {
        skipWhitespace()
        let count = word.utf8CodeUnitCount
        guard offset + count <= bytes.count else { return false }
        for index in 0..<count where bytes[offset + index] != word.utf8Start[index] { return false }
        offset += count
        return true
    }

    /// Scans one complete value (with everything nested in it) starting at the next non-whitespace
    /// byte. `enclosingDepth`: containers the caller already opened around the value (they count toward
    /// `rules.maximumDepth`).
    package mutating func scanValue(allowNull: Bool, enclosingDepth: Int = 0) throws(JSONValidationError) {
        let maximumDepth = rules.maximumDepth
        var depth = enclosingDepth
        var objectLevels: UInt64 = 0  // bit d set: container at depth d (0-based) is an object
        valueLoop: while true {
            skipWhitespace()
            guard let byte = peek() else { throw fail(.unexpectedEnd(expected: .value)) }
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard depth < maximumDepth else { throw fail(.tooDeep(limit: maximumDepth)) }
                let isObject = byte == UInt8(ascii: "{")
                let bit: UInt64 = 1 << UInt64(depth)
                objectLevels = isObject ? objectLevels | bit : objectLevels & ~bit
                depth += 1
                offset += 1
                skipWhitespace()
                let closing = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
                if peek() == closing {
                    offset += 1
                    depth -= 1
                } else if isObject {
                    try scanKeyAndColon(.objectKeyOrEnd)
                    continue valueLoop
                } else {
                    continue valueLoop
                }
            case UInt8(ascii: "\""):
                _ = try scanString()
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                try scanNumber()
            case UInt8(ascii: "t"):
                try scanLiteral("true", .trueLiteral)
            case UInt8(ascii: "f"):
                try scanLiteral("false", .falseLiteral)
            case UInt8(ascii: "n"):
                guard allowNull else { throw fail(.nullNotAllowed) }
                try scanLiteral("null", .nullLiteral)
            default:
                throw fail(.unexpectedByte(byte, expected: .value))
            }
            // A value ended: close finished containers, or move on to the next element.
            while depth > enclosingDepth {
                skipWhitespace()
                let inObject = objectLevels & (1 << UInt64(depth - 1)) != 0
                let separator = inObject ? JSONValidationError.Expectation.commaOrObjectEnd : .commaOrArrayEnd
                switch peek() {
                case UInt8(ascii: ","):
                    offset += 1
                    if inObject {
                        skipWhitespace()
                        try scanKeyAndColon(.objectKey)
                    }
                    continue valueLoop
                case UInt8(ascii: "}") where inObject, UInt8(ascii: "]") where !inObject:
                    offset += 1
                    depth -= 1
                default:
                    throw mismatch(separator)
                }
            }
            return
        }
    }

    private mutating func scanKeyAndColon(_ expected: JSONValidationError.Expectation) throws(JSONValidationError) {
        guard peek() == UInt8(ascii: "\"") else { throw mismatch(expected) }
        _ = try scanString()
        skipWhitespace()
        try expect(UInt8(ascii: ":"), .colon)
    }

    private mutating func scanLiteral(
        _ literal: StaticString, _ expected: JSONValidationError.Expectation
    )
        throws(JSONValidationError)
    {
        let count = literal.utf8CodeUnitCount
        for index in 0..<count {
            guard peek() == literal.utf8Start[index] else { throw mismatch(expected) }
            offset += 1
        }
    }

    /// Scans a string starting at its opening quote. Returns the byte range between the quotes and
    /// whether it contains escapes (so callers can use the bytes directly when it does not).
    package mutating func scanString() throws(JSONValidationError) -> (contents: Range<Int>, hasEscapes: Bool) {
        assert(peek() == UInt8(ascii: "\""))
        offset += 1
        let start = offset
        var hasEscapes = false
        while true {
            offset = PlainASCII.runEnd(bytes, from: offset)
            guard offset < bytes.count else { break }
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                let contents = start..<offset
                offset += 1
                return (contents, hasEscapes)
            } else if byte == UInt8(ascii: "\\") {
                hasEscapes = true
                try scanEscape()
            } else if byte < 0x20 {
                throw fail(.controlCharacterInString(byte))
            } else {
                assert(byte >= 0x80)
                let length = UTF8Validation.multiByteSequenceLength(bytes, at: offset)
                guard length > 0 else { throw fail(.invalidUTF8) }
                offset += length
            }
        }
        throw fail(.unexpectedEnd(expected: .closingQuote))
    }

    private mutating func scanEscape() throws(JSONValidationError) {
        assert(peek() == UInt8(ascii: "\\"))
        let escapeStart = offset
        offset += 1
        guard let kind = peek() else { throw fail(.unexpectedEnd(expected: .escapeCharacter)) }
        switch kind {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            offset += 1
        case UInt8(ascii: "u"):
            offset += 1
            let unit = try scanHex4()
            guard rules.pairsSurrogates else { return }
            if unit >= 0xDC00 && unit <= 0xDFFF {
                throw JSONValidationError(offset: escapeStart, problem: .unpairedSurrogate)
            }
            if unit >= 0xD800 && unit <= 0xDBFF {
                // A high surrogate must be followed immediately by an escaped low surrogate.
                guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"),
                    bytes[offset + 1] == UInt8(ascii: "u")
                else { throw JSONValidationError(offset: escapeStart, problem: .unpairedSurrogate) }
                offset += 2
                let low = try scanHex4()
                guard low >= 0xDC00 && low <= 0xDFFF else {
                    throw JSONValidationError(offset: escapeStart, problem: .unpairedSurrogate)
                }
            }
        default:
            throw fail(.unexpectedByte(kind, expected: .escapeCharacter))
        }
    }

    private mutating func scanHex4() throws(JSONValidationError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek(), let nibble = Self.hexValue(byte) else { throw mismatch(.hexDigit) }
            value = value << 4 | UInt32(nibble)
            offset += 1
        }
        return value
    }

    package static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }

    private static func isDigit(_ byte: UInt8?) -> Bool {
        guard let byte else { return false }
        return byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private mutating func scanDigits() throws(JSONValidationError) {
        guard Self.isDigit(peek()) else { throw mismatch(.digit) }
        while Self.isDigit(peek()) { offset += 1 }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    package mutating func scanNumber() throws(JSONValidationError) {
        if peek() == UInt8(ascii: "-") { offset += 1 }
        if peek() == UInt8(ascii: "0") {
            offset += 1  // a leading zero stands alone; "01" fails at the '1' in the caller
        } else {
            try scanDigits()
        }
        if peek() == UInt8(ascii: ".") {
            offset += 1
            try scanDigits()
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            offset += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { offset += 1 }
            try scanDigits()
        }
    }

    /// The raw bytes of `range` (a string's contents, a value), in place.
    package func slice(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: bytes[range])
    }

    /// Whether the raw bytes of `range` are exactly `text` (a key compared in place, escapes not decoded).
    package func slice(_ range: Range<Int>, equals text: StaticString) -> Bool {
        text.withUTF8Buffer { expected in
            guard range.count == expected.count else { return false }
            for index in 0..<expected.count where bytes[range.lowerBound + index] != expected[index] { return false }
            return true
        }
    }

    /// Decodes the contents of a string this scanner already scanned (escapes resolved; a lone surrogate,
    /// which only `pairsSurrogates: false` lets through, becomes U+FFFD). Control-plane use only: it
    /// allocates the result.
    package func decodeString(_ contents: Range<Int>, hasEscapes: Bool) -> String {
        let raw = slice(contents)
        guard hasEscapes else { return String(decoding: raw, as: UTF8.self) }
        var utf8: [UInt8] = []
        utf8.reserveCapacity(raw.count)
        var index = 0
        func hex4(_ at: Int) -> UInt32 {
            var value: UInt32 = 0
            for i in 0..<4 { value = value << 4 | UInt32(Self.hexValue(raw[at + i])!) }
            return value
        }
        /// The low surrogate escaped at `at` (`\uDC00`...`\uDFFF`), if one is there.
        func lowSurrogate(_ at: Int) -> UInt32? {
            guard at + 6 <= raw.count, raw[at] == UInt8(ascii: "\\"), raw[at + 1] == UInt8(ascii: "u") else {
                return nil
            }
            let unit = hex4(at + 2)
            return unit >= 0xDC00 && unit <= 0xDFFF ? unit : nil
        }
        while index < raw.count {
            let byte = raw[index]
            guard byte == UInt8(ascii: "\\") else {
                utf8.append(byte)
                index += 1
                continue
            }
            let kind = raw[index + 1]
            index += 2
            switch kind {
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(index)
                index += 4
                if scalar >= 0xD800 && scalar <= 0xDBFF, let low = lowSurrogate(index) {
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                UTF8.encode(Unicode.Scalar(scalar) ?? "\u{FFFD}") { utf8.append($0) }
            default: utf8.append(kind)  // '"', '\\', '/'
            }
        }
        return String(decoding: utf8, as: UTF8.self)
    }
}

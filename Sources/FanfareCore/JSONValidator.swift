/// Strict RFC 8259 validation of caller-supplied JSON (`content-state`, `attributes`) and the scanner
/// shared with the APNs error-body parser.
///
/// Strict means: exactly one value surrounded by optional whitespace, no byte-order mark, no trailing
/// garbage, well-formed UTF-8, escapes limited to `\" \\ \/ \b \f \n \r \t \uXXXX`, `\u` surrogates
/// only as high+low pairs, numbers in JSON's grammar (no leading zeros, `+`, `.5`, `NaN`), at most
/// ``JSONValidator/maximumDepth`` nested containers. Validation is iterative and never allocates.
public enum JSONValidator {
    /// Containers may nest this deep; the next opening bracket is an error.
    public static let maximumDepth = 64

    /// Returns nil when `bytes` is one valid JSON value, otherwise the first problem and its offset.
    public static func validate(_ bytes: UnsafeRawBufferPointer) -> JSONValidationError? {
        validate(bytes, requireObject: false, allowNull: true)
    }

    /// Like ``validate(_:)``, also checking that the value is an object (`requireObject`) and that it
    /// holds no `null` anywhere (`allowNull: false`; nulls break ActivityKit decoding, apns-spec §3.4).
    public static func validate(
        _ bytes: UnsafeRawBufferPointer, requireObject: Bool, allowNull: Bool
    ) -> JSONValidationError? {
        var scanner = JSONScanner(bytes)
        do throws(JSONValidationError) {
            scanner.skipWhitespace()
            if requireObject, let first = scanner.peek(), first != UInt8(ascii: "{") {
                return JSONValidationError(offset: scanner.offset, problem: .notAnObject)
            }
            try scanner.scanValue(allowNull: allowNull)
            scanner.skipWhitespace()
            if let trailing = scanner.peek() {
                return JSONValidationError(
                    offset: scanner.offset, problem: .unexpectedByte(trailing, expected: .endOfInput))
            }
            return nil
        } catch {
            return error
        }
    }
}

/// Where JSON validation failed and why.
public struct JSONValidationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What the validator was looking for when it stopped.
    public enum Expectation: String, Sendable {
        case value = "a JSON value (object, array, string, number, true, false or null)"
        case objectKeyOrEnd = "a string key or '}'"
        case objectKey = "a string key"
        case colon = "':' after an object key"
        case commaOrObjectEnd = "',' or '}'"
        case commaOrArrayEnd = "',' or ']'"
        case digit = "a digit"
        case hexDigit = "a hex digit in a \\u escape"
        case escapeCharacter = "an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)"
        case closingQuote = "a closing '\"'"
        case trueLiteral = "the literal true"
        case falseLiteral = "the literal false"
        case nullLiteral = "the literal null"
        case endOfInput = "the end of the input"
    }

    public enum Problem: Equatable, Sendable {
        /// The input ended early (an empty input is `unexpectedEnd(expected: .value)` at offset 0).
        case unexpectedEnd(expected: Expectation)
        case unexpectedByte(UInt8, expected: Expectation)
        case invalidUTF8
        /// A raw byte below 0x20 inside a string; it has to be escaped.
        case controlCharacterInString(UInt8)
        /// A `\uD800`...`\uDFFF` escape that is not part of a high+low surrogate pair.
        case unpairedSurrogate
        case tooDeep(limit: Int)
        /// The value is valid JSON but not an object where an object is required.
        case notAnObject
        /// A `null` where nulls are not allowed.
        case nullNotAllowed
    }

    /// Byte offset into the input where the problem was found.
    public var offset: Int
    public var problem: Problem

    public init(offset: Int, problem: Problem) {
        self.offset = offset
        self.problem = problem
    }

    public var description: String {
        let prefix = "invalid JSON at byte offset \(offset): "
        switch problem {
        case .unexpectedEnd(let expected):
            return prefix + "input ended; expected \(expected.rawValue)"
        case .unexpectedByte(let byte, let expected):
            return prefix + "found \(Self.show(byte)); expected \(expected.rawValue)"
        case .invalidUTF8:
            return prefix + "invalid UTF-8; JSON text must be well-formed UTF-8"
        case .controlCharacterInString(let byte):
            return prefix + "raw control character \(Self.show(byte)) in a string; escape it (e.g. \\n, \\u001f)"
        case .unpairedSurrogate:
            return prefix + "unpaired UTF-16 surrogate escape; use a \\uD800-\\uDBFF + \\uDC00-\\uDFFF pair"
        case .tooDeep(let limit):
            return prefix + "nesting deeper than \(limit) objects/arrays; flatten the value"
        case .notAnObject:
            return prefix + "expected a JSON object ('{...}')"
        case .nullNotAllowed:
            return prefix + "null is not allowed here (ActivityKit fails to decode it); omit the key instead"
        }
    }

    static func show(_ byte: UInt8) -> String {
        let hex = String(byte, radix: 16, uppercase: true)
        let code = "0x" + (byte < 0x10 ? "0" : "") + hex
        if byte >= 0x21 && byte < 0x7F {
            return "'\(Character(Unicode.Scalar(byte)))' (\(code))"
        }
        return code
    }
}

/// JSON that was validated once and can then be embedded verbatim (no re-encoding per push).
public struct RawJSON: Sendable, Hashable, CustomStringConvertible {
    /// The validated UTF-8 bytes, exactly as supplied.
    public let bytes: [UInt8]
    /// True when the value is an object (`content-state` and `attributes` must be).
    public let isObject: Bool

    /// Validates `json`; by default it must be an object with no `null` inside.
    public init(validating json: String, requireObject: Bool = true, allowNull: Bool = false)
        throws(JSONValidationError)
    {
        try self.init(validatingBytes: Array(json.utf8), requireObject: requireObject, allowNull: allowNull)
    }

    /// Validates UTF-8 `bytes`; by default they must be an object with no `null` inside.
    public init(
        validatingBytes bytes: some Collection<UInt8>, requireObject: Bool = true, allowNull: Bool = false
    ) throws(JSONValidationError) {
        let copy = Array(bytes)
        let error = copy.withUnsafeBytes { raw in
            JSONValidator.validate(raw, requireObject: requireObject, allowNull: allowNull)
        }
        if let error { throw error }
        self.bytes = copy
        self.isObject = copy.first(where: { !JSONScanner.isWhitespace($0) }) == UInt8(ascii: "{")
        assert(!requireObject || isObject)
    }

    public var count: Int { bytes.count }

    @inlinable
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    public var description: String { String(decoding: bytes, as: UTF8.self) }
}

/// A cursor over JSON bytes. Each `scan…` method consumes one token or value and throws the first
/// problem; nothing allocates.
struct JSONScanner {
    let bytes: UnsafeRawBufferPointer
    var offset: Int = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    func peek() -> UInt8? {
        offset < bytes.count ? bytes[offset] : nil
    }

    mutating func skipWhitespace() {
        while offset < bytes.count && Self.isWhitespace(bytes[offset]) {
            offset += 1
        }
    }

    func fail(_ problem: JSONValidationError.Problem) -> JSONValidationError {
        JSONValidationError(offset: offset, problem: problem)
    }

    /// The error for "found something else (or nothing) where `expected` had to be".
    func mismatch(_ expected: JSONValidationError.Expectation) -> JSONValidationError {
        if let byte = peek() {
            return fail(.unexpectedByte(byte, expected: expected))
        }
        return fail(.unexpectedEnd(expected: expected))
    }

    mutating func expect(_ byte: UInt8, _ expected: JSONValidationError.Expectation) throws(JSONValidationError) {
        guard peek() == byte else { throw mismatch(expected) }
        offset += 1
    }

    /// Scans one complete value (with everything nested in it) starting at the next non-whitespace
    /// byte. Iterative: the container stack is one bit per level. `enclosingDepth`: containers the caller
    /// already opened around the value (they count toward `maximumDepth`).
    mutating func scanValue(allowNull: Bool, enclosingDepth: Int = 0) throws(JSONValidationError) {
        let maximumDepth = JSONValidator.maximumDepth
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

    private mutating func scanLiteral(_ literal: StaticString, _ expected: JSONValidationError.Expectation)
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
    mutating func scanString() throws(JSONValidationError) -> (contents: Range<Int>, hasEscapes: Bool) {
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

    static func hexValue(_ byte: UInt8) -> UInt8? {
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
    mutating func scanNumber() throws(JSONValidationError) {
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

    /// Decodes the contents of a string this scanner already validated (escapes resolved).
    /// Control-plane use only: it allocates the result.
    func decodeString(_ contents: Range<Int>, hasEscapes: Bool) -> String {
        let raw = UnsafeRawBufferPointer(rebasing: bytes[contents])
        guard hasEscapes else { return String(decoding: raw, as: UTF8.self) }
        var utf8: [UInt8] = []
        utf8.reserveCapacity(raw.count)
        var index = 0
        func hex4(_ at: Int) -> UInt32 {
            var value: UInt32 = 0
            for i in 0..<4 { value = value << 4 | UInt32(Self.hexValue(raw[at + i])!) }
            return value
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
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    let low = hex4(index + 2)  // validated: "\uDC00"..."\uDFFF" follows
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                UTF8.encode(Unicode.Scalar(scalar)!) { utf8.append($0) }
            default: utf8.append(kind)  // '"', '\\', '/'
            }
        }
        return String(decoding: utf8, as: UTF8.self)
    }
}

/// Strict RFC 8259 validation of caller-supplied JSON (`content-state`, `attributes`), on ``JSONScanner``.
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
            try scanner.scanDocument(allowNull: allowNull)
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
    public init(
        validating json: String, requireObject: Bool = true, allowNull: Bool = false
    )
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

// Just enough JSON to read JWT headers and claims: one object whose string and integer members
// we keep; other values (floats, booleans, null, nested objects/arrays) are checked and skipped.

enum FlatJSONValue: Equatable {
    case string(String)
    case integer(Int64)
    /// Any other valid JSON value; its contents are not kept.
    case other
}

struct FlatJSONObject {
    let members: [String: FlatJSONValue]

    subscript(name: String) -> FlatJSONValue? { members[name] }

    /// Parses `bytes` as one JSON object. Throws a short reason for invalid JSON, a non-object,
    /// duplicate member names (ambiguous for a security token), or nesting deeper than 16.
    static func parse(_ bytes: [UInt8]) throws(FlatJSONError) -> FlatJSONObject {
        var parser = Parser(bytes: bytes)
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else { throw FlatJSONError(reason: "not a JSON object") }
        var members: [String: FlatJSONValue] = [:]
        try parser.parseObject(depth: 0) { name, value throws(FlatJSONError) in
            if members.updateValue(value, forKey: name) != nil {
                throw FlatJSONError(reason: "duplicate member '\(name)'")
            }
        }
        parser.skipWhitespace()
        guard parser.isAtEnd else { throw FlatJSONError(reason: "trailing bytes after the object") }
        return FlatJSONObject(members: members)
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0
        static let maximumDepth = 16

        var isAtEnd: Bool { index >= bytes.count }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while let byte = peek(), byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        mutating func expect(_ byte: UInt8) throws(FlatJSONError) {
            guard peek() == byte else {
                throw FlatJSONError(reason: "expected '\(Character(Unicode.Scalar(byte)))' at byte \(index)")
            }
            index += 1
        }

        /// Parses `{...}` at the cursor, reporting each member; only depth 0 members are kept.
        mutating func parseObject(
            depth: Int,
            _ member: (String, FlatJSONValue) throws(FlatJSONError) -> Void
        ) throws(FlatJSONError) {
            try expect(UInt8(ascii: "{"))
            skipWhitespace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                let name = try parseString()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                skipWhitespace()
                try member(name, try parseValue(depth: depth))
                skipWhitespace()
                if peek() == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                try expect(UInt8(ascii: "}"))
                return
            }
        }

        mutating func parseValue(depth: Int) throws(FlatJSONError) -> FlatJSONValue {
            guard let byte = peek() else { throw FlatJSONError(reason: "unexpected end of input") }
            switch byte {
            case UInt8(ascii: "\""):
                return .string(try parseString())
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return try parseNumber()
            case UInt8(ascii: "t"): try parseLiteral("true")
            case UInt8(ascii: "f"): try parseLiteral("false")
            case UInt8(ascii: "n"): try parseLiteral("null")
            case UInt8(ascii: "{"):
                guard depth < Self.maximumDepth else { throw FlatJSONError(reason: "nested too deeply") }
                try parseObject(depth: depth + 1) { _, _ in }
            case UInt8(ascii: "["):
                guard depth < Self.maximumDepth else { throw FlatJSONError(reason: "nested too deeply") }
                try parseArray(depth: depth + 1)
            default:
                throw FlatJSONError(reason: "unexpected character at byte \(index)")
            }
            return .other
        }

        mutating func parseArray(depth: Int) throws(FlatJSONError) {
            try expect(UInt8(ascii: "["))
            skipWhitespace()
            if peek() == UInt8(ascii: "]") {
                index += 1
                return
            }
            while true {
                skipWhitespace()
                _ = try parseValue(depth: depth)
                skipWhitespace()
                if peek() == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                try expect(UInt8(ascii: "]"))
                return
            }
        }

        mutating func parseLiteral(_ literal: StaticString) throws(FlatJSONError) {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw FlatJSONError(reason: "unexpected end of input") }
            for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
                throw FlatJSONError(reason: "invalid literal at byte \(index)")
            }
            index += count
        }

        /// An integer becomes `.integer` (if it fits Int64); fractions and exponents `.other`.
        mutating func parseNumber() throws(FlatJSONError) -> FlatJSONValue {
            let start = index
            if peek() == UInt8(ascii: "-") { index += 1 }
            let digitsStart = index
            while let byte = peek(), byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") { index += 1 }
            let digitCount = index - digitsStart
            guard digitCount > 0 else { throw FlatJSONError(reason: "invalid number at byte \(start)") }
            guard !(digitCount > 1 && bytes[digitsStart] == UInt8(ascii: "0")) else {
                throw FlatJSONError(reason: "number with a leading zero at byte \(start)")
            }
            var isInteger = true
            if peek() == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                try skipDigits(start)
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                try skipDigits(start)
            }
            guard isInteger else { return .other }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            return Int64(text).map { .integer($0) } ?? .other
        }

        mutating func skipDigits(_ start: Int) throws(FlatJSONError) {
            let digitsStart = index
            while let byte = peek(), byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") { index += 1 }
            guard index > digitsStart else { throw FlatJSONError(reason: "invalid number at byte \(start)") }
        }

        mutating func parseString() throws(FlatJSONError) -> String {
            try expect(UInt8(ascii: "\""))
            var literalStart = index
            var literal: [UInt8] = []
            while true {
                guard let byte = peek() else { throw FlatJSONError(reason: "unterminated string") }
                if byte == UInt8(ascii: "\"") { break }
                if byte < 0x20 { throw FlatJSONError(reason: "control character in string at byte \(index)") }
                if byte != UInt8(ascii: "\\") {
                    index += 1
                    continue
                }
                literal.append(contentsOf: bytes[literalStart..<index])
                index += 1
                let scalar = try parseEscape()
                UTF8.encode(scalar) { literal.append($0) }
                literalStart = index
            }
            literal.append(contentsOf: bytes[literalStart..<index])
            index += 1  // closing quote
            guard let text = String(validating: literal, as: UTF8.self) else {
                throw FlatJSONError(reason: "string is not valid UTF-8")
            }
            return text
        }

        /// After a backslash: one escape, including `\uXXXX` surrogate pairs.
        mutating func parseEscape() throws(FlatJSONError) -> Unicode.Scalar {
            guard let byte = peek() else { throw FlatJSONError(reason: "unterminated escape") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return "\""
            case UInt8(ascii: "\\"): return "\\"
            case UInt8(ascii: "/"): return "/"
            case UInt8(ascii: "b"): return "\u{08}"
            case UInt8(ascii: "f"): return "\u{0C}"
            case UInt8(ascii: "n"): return "\n"
            case UInt8(ascii: "r"): return "\r"
            case UInt8(ascii: "t"): return "\t"
            case UInt8(ascii: "u"):
                let first = try parseHex4()
                if (0xD800..<0xDC00).contains(first) {
                    guard peek() == UInt8(ascii: "\\") else { throw FlatJSONError(reason: "lone surrogate") }
                    index += 1
                    guard peek() == UInt8(ascii: "u") else { throw FlatJSONError(reason: "lone surrogate") }
                    index += 1
                    let second = try parseHex4()
                    guard (0xDC00..<0xE000).contains(second) else { throw FlatJSONError(reason: "lone surrogate") }
                    let value = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    return Unicode.Scalar(value)!
                }
                guard let scalar = Unicode.Scalar(first) else { throw FlatJSONError(reason: "lone surrogate") }
                return scalar
            default:
                throw FlatJSONError(reason: "invalid escape at byte \(index - 1)")
            }
        }

        mutating func parseHex4() throws(FlatJSONError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw FlatJSONError(reason: "unterminated \\u escape") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw FlatJSONError(reason: "invalid \\u escape at byte \(index)")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }
    }
}

struct FlatJSONError: Error {
    let reason: String
}

// Just enough JSON to read JWT headers and claims: one object whose string and integer members we keep;
// other values (floats, booleans, null, nested objects/arrays) are checked and skipped. FanfareCore's
// `JSONScanner` reads the bytes.
import FanfareCore

enum FlatJSONValue: Equatable {
    case string(String)
    case integer(Int64)
    /// Any other valid JSON value; its contents are not kept.
    case other
}

struct FlatJSONObject {
    let members: [String: FlatJSONValue]

    subscript(name: String) -> FlatJSONValue? { members[name] }

    /// Containers nest at most 16 deep below the object (17 with it): a security token has no use for more.
    private static let rules = JSONScanner.Rules(maximumDepth: 17, pairsSurrogates: true)

    /// Parses `bytes` as one JSON object. Throws a short reason for invalid JSON, a non-object,
    /// duplicate member names (ambiguous for a security token), or nesting deeper than 16.
    static func parse(_ bytes: [UInt8]) throws(FlatJSONError) -> FlatJSONObject {
        let parsed = bytes.withUnsafeBytes { raw -> Result<FlatJSONObject, FlatJSONError> in
            var scanner = JSONScanner(raw, rules: rules)
            scanner.skipWhitespace()
            guard scanner.peek() == UInt8(ascii: "{") else {
                return .failure(FlatJSONError(reason: "not a JSON object"))
            }
            var members: [String: FlatJSONValue] = [:]
            do throws(FlatJSONError) {
                try scanner.scanObjectDocument(invalid: FlatJSONError.init(invalid:)) {
                    scanner, key throws(FlatJSONError) in
                    let name = scanner.decodeString(key.contents, hasEscapes: key.hasEscapes)
                    if members.updateValue(try value(&scanner), forKey: name) != nil {
                        throw FlatJSONError(reason: "duplicate member '\(name)'")
                    }
                }
            } catch {
                return .failure(error)
            }
            return .success(FlatJSONObject(members: members))
        }
        return try parsed.get()
    }

    /// The member value at the cursor: a string or an integer that fits `Int64` is kept; anything else
    /// (fractions and exponents included) is scanned and becomes `.other`.
    private static func value(_ scanner: inout JSONScanner) throws(FlatJSONError) -> FlatJSONValue {
        do throws(JSONValidationError) {
            switch scanner.peek() ?? 0 {  // 0: at the end, where `scanValue` reports what is missing
            case UInt8(ascii: "\""):
                let (contents, hasEscapes) = try scanner.scanString()
                return .string(scanner.decodeString(contents, hasEscapes: hasEscapes))
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = scanner.offset
                try scanner.scanNumber()
                let text = String(decoding: scanner.slice(start..<scanner.offset), as: UTF8.self)
                return Int64(text).map { .integer($0) } ?? .other
            default:
                try scanner.scanValue(allowNull: true, enclosingDepth: 1)
                return .other
            }
        } catch {
            throw FlatJSONError(invalid: error)
        }
    }
}

struct FlatJSONError: Error {
    let reason: String

    init(reason: String) {
        self.reason = reason
    }

    init(invalid: JSONValidationError) {
        reason = invalid.description
    }
}

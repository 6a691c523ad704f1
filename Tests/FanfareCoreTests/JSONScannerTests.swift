// The scanner's own entry points (JSONValidatorTests covers the grammar through the validator): its rules,
// whole documents, and the top-level object walked member by member.
import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("JSONScanner", .ownThread)
struct JSONScannerTests {
    static func scan<R>(
        _ text: String, rules: JSONScanner.Rules = .strict, _ body: (inout JSONScanner) throws(JSONValidationError) -> R
    ) -> Result<R, JSONValidationError> {
        Array(text.utf8).withUnsafeBytes { bytes in
            var scanner = JSONScanner(bytes, rules: rules)
            do throws(JSONValidationError) {
                return .success(try body(&scanner))
            } catch {
                return .failure(error)
            }
        }
    }

    /// The first problem of `text` as one document, or nil.
    static func problem(_ text: String, rules: JSONScanner.Rules = .strict) -> JSONValidationError? {
        let scanned = scan(text, rules: rules) { s throws(JSONValidationError) in try s.scanDocument() }
        guard case .failure(let error) = scanned else { return nil }
        return error
    }

    static func error(_ offset: Int, _ problem: JSONValidationError.Problem) -> JSONValidationError {
        JSONValidationError(offset: offset, problem: problem)
    }

    @Test func maximumDepthIsARule() {
        let rules = JSONScanner.Rules(maximumDepth: 3, pairsSurrogates: true)
        #expect(Self.problem("[[[1]]]", rules: rules) == nil)
        #expect(Self.problem("[[[[1]]]]", rules: rules) == Self.error(3, .tooDeep(limit: 3)))
    }

    @Test func loneSurrogatesPassOnlyWhenTheRulesSaySo() {
        let lenient = JSONScanner.Rules(maximumDepth: 64, pairsSurrogates: false)
        for text in [#""\ud800""#, #""\udc00x""#, #""\ud800\u0041""#] {
            #expect(Self.problem(text) == Self.error(1, .unpairedSurrogate))
            #expect(Self.problem(text, rules: lenient) == nil)
        }
        // Decoded, a lone one becomes U+FFFD; a pair is still one scalar.
        let decoded = Self.scan(#""a\ud800b\ud83d\ude00""#, rules: lenient) { s throws(JSONValidationError) in
            let (contents, hasEscapes) = try s.scanString()
            return s.decodeString(contents, hasEscapes: hasEscapes)
        }
        #expect(decoded == .success("a\u{FFFD}b\u{1F600}"))
    }

    @Test func findsTheFirstTopLevelMemberByItsRawKey() {
        func find(_ text: String, _ key: StaticString) -> Result<String?, JSONValidationError> {
            Self.scan(text) { s throws(JSONValidationError) in
                try s.scanDocument(findingMember: key).map { String(decoding: s.slice($0), as: UTF8.self) }
            }
        }
        #expect(find(#" {"x":{"aps":1},"aps":{"a":[1]},"aps":2} "#, "aps") == .success(#"{"a":[1]}"#))
        #expect(find(#"{"\u0061ps":1}"#, "aps") == .success(nil))
        #expect(find(#"[{"aps":1}]"#, "aps") == .success(nil))
        #expect(find(#"{"b":1}"#, "aps") == .success(nil))
        #expect(find(#"{"aps":1} x"#, "aps") == .failure(Self.error(10, .unexpectedByte(0x78, expected: .endOfInput))))
        #expect(find(#"{"aps":1,}"#, "aps") == .failure(Self.error(9, .unexpectedByte(0x7D, expected: .objectKey))))
    }

    @Test func walksTheObjectAndMapsJSONProblems() {
        enum Failure: Error, Equatable {
            case json(JSONValidationError)
            case refused(String)
        }
        func walk(_ text: String) -> Result<[String], Failure> {
            Array(text.utf8).withUnsafeBytes { bytes in
                var scanner = JSONScanner(bytes)
                var keys: [String] = []
                do throws(Failure) {
                    try scanner.scanObjectDocument(invalid: { .json($0) }) { s, key throws(Failure) in
                        let name = s.decodeString(key.contents, hasEscapes: key.hasEscapes)
                        if name == "no" { throw .refused(name) }
                        keys.append(name)
                        do throws(JSONValidationError) {
                            try s.scanValue(allowNull: true, enclosingDepth: 1)
                        } catch {
                            throw .json(error)
                        }
                    }
                    return .success(keys)
                } catch {
                    return .failure(error)
                }
            }
        }
        #expect(walk(" {} ") == .success([]))
        #expect(walk(#"{"a":[1,{"b":null}],"c\u0064":"x"}"#) == .success(["a", "cd"]))
        #expect(walk(#"{"a":1,"no":2}"#) == .failure(.refused("no")))
        #expect(walk("[]") == .failure(.json(Self.error(0, .unexpectedByte(0x5B, expected: .value)))))
        #expect(walk("") == .failure(.json(Self.error(0, .unexpectedEnd(expected: .value)))))
        #expect(walk(#"{"a" 1}"#) == .failure(.json(Self.error(5, .unexpectedByte(0x31, expected: .colon)))))
        #expect(
            walk(#"{"a":1 "b":2}"#)
                == .failure(.json(Self.error(7, .unexpectedByte(0x22, expected: .commaOrObjectEnd)))))
    }

    @Test func literalsAreSkippedOnlyWhenTheyAreNext() {
        #expect(
            Self.scan("  true,") { s throws(JSONValidationError) in s.skipLiteral("true") ? s.offset : -1 }
                == .success(6))
        #expect(Self.scan(" nul") { s throws(JSONValidationError) in s.skipLiteral("null") } == .success(false))
    }
}

import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("JSONValidator", .ownThread)
struct JSONValidatorTests {
    typealias Problem = JSONValidationError.Problem

    @Test(
        "accepts valid JSON",
        arguments: [
            "{}", "[]", "0", "-0", "1.5e+10", "-0.0E-0", "123456789012345678901234567890", #""x""#, "true",
            "false", "null", " \t\r\n{ \"a\" : [ 1 , 2.5 , -3e2 , \"s\" , true , false , null , { } ] } \n",
            #""\u00e9\ud83d\ude00\n\/\"\\\b\f\r\t""#, "\"😀 東京 é\"", #"{"a":{"b":{"c":[[],{}]}}}"#,
            "\"\u{2028}\u{2029}\u{7F}\"", #"{"":""}"#, #"[0.5,1E5,-1e-5]"#,
        ])
    func accepts(json: String) {
        #expect(TestSupport.validate(json) == nil)
    }

    @Test(
        "rejects invalid JSON with the offset and what was expected",
        arguments: [
            ("", 0, Problem.unexpectedEnd(expected: .value)),
            ("   ", 3, .unexpectedEnd(expected: .value)),
            ("{", 1, .unexpectedEnd(expected: .objectKeyOrEnd)),
            ("[", 1, .unexpectedEnd(expected: .value)),
            ("[1,", 3, .unexpectedEnd(expected: .value)),
            ("[1,]", 3, .unexpectedByte(UInt8(ascii: "]"), expected: .value)),
            ("[1 2]", 3, .unexpectedByte(UInt8(ascii: "2"), expected: .commaOrArrayEnd)),
            (#"{"a":1,}"#, 7, .unexpectedByte(UInt8(ascii: "}"), expected: .objectKey)),
            (#"{"a" 1}"#, 5, .unexpectedByte(UInt8(ascii: "1"), expected: .colon)),
            ("{a:1}", 1, .unexpectedByte(UInt8(ascii: "a"), expected: .objectKeyOrEnd)),
            (#"{"a":1]"#, 6, .unexpectedByte(UInt8(ascii: "]"), expected: .commaOrObjectEnd)),
            (#"{"a":}"#, 5, .unexpectedByte(UInt8(ascii: "}"), expected: .value)),
            (#"{"a":1"#, 6, .unexpectedEnd(expected: .commaOrObjectEnd)),
            ("[1}", 2, .unexpectedByte(UInt8(ascii: "}"), expected: .commaOrArrayEnd)),
            ("01", 1, .unexpectedByte(UInt8(ascii: "1"), expected: .endOfInput)),
            ("-", 1, .unexpectedEnd(expected: .digit)),
            ("-a", 1, .unexpectedByte(UInt8(ascii: "a"), expected: .digit)),
            ("1.", 2, .unexpectedEnd(expected: .digit)),
            ("1.e5", 2, .unexpectedByte(UInt8(ascii: "e"), expected: .digit)),
            (".5", 0, .unexpectedByte(UInt8(ascii: "."), expected: .value)),
            ("+1", 0, .unexpectedByte(UInt8(ascii: "+"), expected: .value)),
            ("1e", 2, .unexpectedEnd(expected: .digit)),
            ("1e+", 3, .unexpectedEnd(expected: .digit)),
            ("NaN", 0, .unexpectedByte(UInt8(ascii: "N"), expected: .value)),
            ("tru", 3, .unexpectedEnd(expected: .trueLiteral)),
            ("trux", 3, .unexpectedByte(UInt8(ascii: "x"), expected: .trueLiteral)),
            ("nul", 3, .unexpectedEnd(expected: .nullLiteral)),
            ("fals", 4, .unexpectedEnd(expected: .falseLiteral)),
            ("falsey", 5, .unexpectedByte(UInt8(ascii: "y"), expected: .endOfInput)),
            (#""abc"#, 4, .unexpectedEnd(expected: .closingQuote)),
            ("\"a\nb\"", 2, .controlCharacterInString(0x0A)),
            ("\"\u{0}\"", 1, .controlCharacterInString(0x00)),
            (#""\x""#, 2, .unexpectedByte(UInt8(ascii: "x"), expected: .escapeCharacter)),
            (#""\"#, 2, .unexpectedEnd(expected: .escapeCharacter)),
            (#""\u12G4""#, 5, .unexpectedByte(UInt8(ascii: "G"), expected: .hexDigit)),
            (#""\u12"#, 5, .unexpectedEnd(expected: .hexDigit)),
            (#""\ud83d""#, 1, .unpairedSurrogate),
            (#""\ud83dx""#, 1, .unpairedSurrogate),
            (#""\ude00""#, 1, .unpairedSurrogate),
            (#""\ud83d\u0041""#, 1, .unpairedSurrogate),
            ("{} {}", 3, .unexpectedByte(UInt8(ascii: "{"), expected: .endOfInput)),
            ("[1]]", 3, .unexpectedByte(UInt8(ascii: "]"), expected: .endOfInput)),
            ("\u{FEFF}{}", 0, .unexpectedByte(0xEF, expected: .value)),
            ("'a'", 0, .unexpectedByte(UInt8(ascii: "'"), expected: .value)),
        ])
    func rejects(json: String, offset: Int, problem: Problem) {
        #expect(TestSupport.validate(json) == JSONValidationError(offset: offset, problem: problem))
    }

    @Test(
        "rejects ill-formed UTF-8",
        arguments: [
            ([0x22, 0xC0, 0x80, 0x22], 1),  // overlong '\0'
            ([0x22, 0xE0, 0x80, 0xAF, 0x22], 1),  // overlong '/'
            ([0x22, 0xED, 0xA0, 0x80, 0x22], 1),  // UTF-16 surrogate D800
            ([0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], 1),  // above U+10FFFF
            ([0x22, 0xE2, 0x82, 0x22], 1),  // cut short
            ([0x22, 0x61, 0x80, 0x22], 2),  // stray continuation byte
            ([0x22, 0xF0, 0x9F, 0x98], 1),  // input ends mid-sequence
            ([0x22, 0xFF, 0x22], 1),
        ] as [([UInt8], Int)])
    func rejectsInvalidUTF8(bytes: [UInt8], offset: Int) {
        #expect(TestSupport.validate(bytes) == JSONValidationError(offset: offset, problem: .invalidUTF8))
    }

    @Test("non-ASCII bytes outside strings are unexpected")
    func bytesOutsideStrings() {
        let expected = JSONValidationError(offset: 0, problem: .unexpectedByte(0xFF, expected: .value))
        #expect(TestSupport.validate([0xFF]) == expected)
    }

    @Test("limits nesting to 64 containers")
    func depthLimit() {
        let limit = JSONValidator.maximumDepth
        #expect(limit == 64)
        let deepest = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(TestSupport.validate(deepest) == nil)
        let tooDeep = String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1)
        #expect(TestSupport.validate(tooDeep) == JSONValidationError(offset: limit, problem: .tooDeep(limit: 64)))
        let objects = String(repeating: #"{"a":"#, count: limit) + "1" + String(repeating: "}", count: limit)
        #expect(TestSupport.validate(objects) == nil)
        let mixed = String(repeating: #"{"a":["#, count: 33) + String(repeating: "]}", count: 33)
        #expect(TestSupport.validate(mixed)?.problem == .tooDeep(limit: 64))
    }

    @Test("descriptions name the offset, what was found and what was expected")
    func descriptions() {
        #expect(
            TestSupport.validate(#"{"a" 1}"#)?.description
                == "invalid JSON at byte offset 5: found '1' (0x31); expected ':' after an object key")
        #expect(
            TestSupport.validate("[1,")?.description
                == "invalid JSON at byte offset 3: input ended; "
                + "expected a JSON value (object, array, string, number, true, false or null)")
        #expect(TestSupport.validate("\"\t\"")?.description.contains("raw control character 0x09") == true)
        #expect(JSONValidationError(offset: 0, problem: .nullNotAllowed).description.contains("null is not allowed"))
    }

    @Test("RawJSON requires an object by default")
    func rawJSONObject() throws {
        let object = try RawJSON(validating: #"{"a":1}"#)
        #expect(object.isObject)
        #expect(object.description == #"{"a":1}"#)
        #expect(object.count == 7)
        #expect(throws: JSONValidationError(offset: 0, problem: .notAnObject)) { try RawJSON(validating: "[1]") }
        #expect(throws: JSONValidationError(offset: 2, problem: .notAnObject)) { try RawJSON(validating: "  3") }
        #expect(throws: JSONValidationError(offset: 0, problem: .notAnObject)) { try RawJSON(validating: "null") }
        let array = try RawJSON(validating: " [1]", requireObject: false)
        #expect(!array.isObject)
        #expect(try RawJSON(validating: "  {}").isObject)
        #expect(throws: JSONValidationError(offset: 5, problem: .unexpectedByte(0x7D, expected: .value))) {
            try RawJSON(validating: #"{"a":}"#)
        }
    }

    @Test("RawJSON rejects null anywhere unless allowed")
    func rawJSONNull() throws {
        #expect(throws: JSONValidationError(offset: 5, problem: .nullNotAllowed)) {
            try RawJSON(validating: #"{"a":null}"#)
        }
        #expect(throws: JSONValidationError(offset: 13, problem: .nullNotAllowed)) {
            try RawJSON(validating: #"{"a":[1,{"b":null}]}"#)
        }
        #expect(throws: JSONValidationError(offset: 0, problem: .nullNotAllowed)) {
            try RawJSON(validating: "null", requireObject: false)
        }
        #expect(try RawJSON(validating: #"{"a":null}"#, allowNull: true).count == 10)
        #expect(try RawJSON(validating: #"{"a":"null"}"#).count == 12)  // the string "null" is fine
    }

    @Test("RawJSON from bytes equals RawJSON from the same string")
    func rawJSONBytes() throws {
        let text = #"{"score":[2,1],"name":"Åsa"}"#
        let fromBytes = try RawJSON(validatingBytes: Array(text.utf8))
        #expect(fromBytes == (try RawJSON(validating: text)))
        #expect(fromBytes.bytes == Array(text.utf8))
        #expect(throws: JSONValidationError.self) { try RawJSON(validatingBytes: [0x7B, 0x22, 0xFF, 0x22]) }
    }
}

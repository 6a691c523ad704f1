import FanfareCore
import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct SimulatorJSONTests {
    @Test(arguments: [
        "{}", "[]", "0", "-0", "1.5e10", "-12.25E-3", "true", "false", "null", #""x""#,
        " {\n\"a\" : [1, {\"b\":null}] }\t",
        #"{"s":"\"\\\/\b\f\n\r\t\u00e9"}"#, #"{"é":"日本語 🎉"}"#, #"[[[[]]]]"#,
    ])
    func acceptsValidJSON(_ text: String) {
        #expect(withBytes(text) { SimulatorJSON.isValid($0) })
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{,}", #"{"a"}"#, #"{"a":}"#, #"{"a":1,}"#, "01", "1.", ".5", "1e", "+1", "tru",
        "nul",
        #""abc"#, "\"a\u{01}b\"", #""\x""#, #""\u12G4""#, "{} {}", "[1 2]", #"{'a':1}"#, "NaN",
    ])
    func rejectsInvalidJSON(_ text: String) {
        #expect(!withBytes(text) { SimulatorJSON.isValid($0) })
    }

    @Test func rejectsInvalidUTF8() {
        let cases: [[UInt8]] = [
            [0x22, 0xC3, 0x22],  // truncated 2-byte sequence
            [0x22, 0xC0, 0x80, 0x22],  // overlong
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // surrogate
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
            [0x22, 0xFF, 0x22],
        ]
        for bytes in cases {
            #expect(!bytes.withUnsafeBytes { SimulatorJSON.isValid($0) })
        }
    }

    @Test func nestingIsBounded() {
        let deep = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        let tooDeep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(withBytes(deep) { SimulatorJSON.isValid($0) })
        #expect(!withBytes(tooDeep) { SimulatorJSON.isValid($0) })
        let hostile = String(repeating: "[", count: 100_000)
        #expect(!withBytes(hostile) { SimulatorJSON.isValid($0) })
    }

    @Test func payloadShapes() {
        #expect(withBytes(#"{"aps":{}}"#) { PayloadShape(of: $0) } == .objectWithAPS)
        #expect(withBytes(#" { "x" : 1 , "aps" : { "alert" : "hi" } } "#) { PayloadShape(of: $0) } == .objectWithAPS)
        #expect(withBytes(#"{"aps":[]}"#) { PayloadShape(of: $0) } == .missingAPS)
        #expect(withBytes(#"{"nested":{"aps":{}}}"#) { PayloadShape(of: $0) } == .missingAPS)
        #expect(withBytes(#"[{"aps":{}}]"#) { PayloadShape(of: $0) } == .missingAPS)
        #expect(withBytes(#"{"aps":{}"#) { PayloadShape(of: $0) } == .malformed)
        #expect(withBytes(#"{"aps":{}} trailing"#) { PayloadShape(of: $0) } == .malformed)
    }

    @Test func minifyingDropsOnlyInsignificantWhitespace() {
        let source = "{ \"a b\" : [ 1 ,\n 2 ] ,\t\"c\":\" x \\\" y \" }"
        var output = [UInt8](repeating: 0, count: source.utf8.count)
        let count = withBytes(source) { input in
            output.withUnsafeMutableBytes { SimulatorJSON.writeMinified(input, into: $0, at: 0) }
        }
        #expect(String(decoding: output[0..<count], as: UTF8.self) == #"{"a b":[1,2],"c":" x \" y "}"#)
    }

    /// The one difference from FanfareCore's `JSONValidator`: lone `\u` surrogate escapes pass.
    @Test(arguments: [#""\ud800""#, #""\udc00""#, #"{"a":"\ud800\u0041"}"#, #""\ud800\ud800""#])
    func loneSurrogateEscapesAreAccepted(_ text: String) {
        #expect(withBytes(text) { SimulatorJSON.isValid($0) })
        #expect(withBytes(text) { JSONValidator.validate($0) }?.problem == .unpairedSurrogate)
    }

    @Test func membersAreVisitedInOrderWithRawKeys() {
        var seen: [String] = []
        let body = #" {"a":1, "b\u0063":[{"x":2}], "a":"z"} "#
        let isObject = withBytes(body) { bytes in
            SimulatorJSON.forEachTopLevelMember(bytes) { key, value in
                seen.append(String(decoding: key, as: UTF8.self) + "=" + String(decoding: bytes[value], as: UTF8.self))
            }
        }
        #expect(isObject == true)
        #expect(seen == ["a=1", #"b\u0063=[{"x":2}]"#, #"a="z""#])
        #expect(withBytes("[1]") { SimulatorJSON.forEachTopLevelMember($0) { _, _ in } } == false)
        #expect(withBytes(#"{"a":1"#) { SimulatorJSON.forEachTopLevelMember($0) { _, _ in } } == nil)
    }
}

import FanfareTestSupport
import Testing
@testable import FanfareTLS

@Suite(.ownThread) struct FlatJSONObjectTests {
    private func parse(_ text: String) throws(FlatJSONError) -> FlatJSONObject {
        try FlatJSONObject.parse(Array(text.utf8))
    }

    @Test func keepsStringsAndIntegersSkipsTheRest() throws {
        let object = try parse(
            #" { "a" : "x\"\u00e9\ud83d\ude00" , "n": -42, "f": 1.5, "b": true, "z": null, "o": {"p": [1, {"q": []}]} } "#
        )
        #expect(object["a"] == .string("x\"é😀"))
        #expect(object["n"] == .integer(-42))
        #expect(object["f"] == .other)
        #expect(object["b"] == .other)
        #expect(object["o"] == .other)
        #expect(object["missing"] == nil)
    }

    @Test(arguments: [
        "", "[]", "{", #"{"a":1,}"#, #"{"a":1}x"#, #"{"a":01}"#, #"{"a":"\x"}"#, #"{"a":1,"a":2}"#,
        #"{"a":"\ud800"}"#, "{\"a\":\"\u{01}\"}", #"{"a":tru}"#,
    ])
    func rejectsInvalidJSON(_ text: String) {
        #expect(throws: FlatJSONError.self) { try parse(text) }
    }

    @Test func nestingBelowTheObjectStopsAtSixteen() throws {
        func nested(_ depth: Int) -> String {
            #"{"a":"# + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}"
        }
        #expect(try parse(nested(16))["a"] == .other)
        #expect(throws: FlatJSONError.self) { try parse(nested(17)) }
    }

    @Test func integersThatDoNotFitAreOther() throws {
        let object = try parse(#"{"big":9223372036854775808,"max":9223372036854775807,"e":1e3,"z":-0}"#)
        #expect(object["big"] == .other)
        #expect(object["max"] == .integer(.max))
        #expect(object["e"] == .other)
        #expect(object["z"] == .integer(0))
    }
}

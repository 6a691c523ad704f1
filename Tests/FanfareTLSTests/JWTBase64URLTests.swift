import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareTLS

@Suite(.ownThread) struct JWTBase64URLTests {
    @Test func matchesFoundationForAllLengths() throws {
        var bytes: [UInt8] = []
        for length in 0..<70 {
            let encoded = JWTBase64URL.encode(bytes)
            let expected = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            #expect(encoded == expected, "length \(length)")
            #expect(JWTBase64URL.decode(encoded) == bytes)
            bytes.append(UInt8(truncatingIfNeeded: length &* 97 &+ 251))
        }
    }

    @Test func rejectsPaddingForeignCharactersAndNonCanonicalTails() {
        #expect(JWTBase64URL.decode("QQ==") == nil)
        #expect(JWTBase64URL.decode("a+b/") == nil)
        #expect(JWTBase64URL.decode("A") == nil)
        #expect(JWTBase64URL.decode("QR") == nil)  // "QQ" is canonical for "A"; "QR" has stray bits
        #expect(JWTBase64URL.decode("QQ") == [0x41])
    }
}

@Suite(.ownThread) struct FlatJSONObjectTests {
    private func parse(_ text: String) throws(FlatJSONError) -> FlatJSONObject {
        try FlatJSONObject.parse(Array(text.utf8))
    }

    @Test func keepsStringsAndIntegersSkipsTheRest() throws {
        let object = try parse(#" { "a" : "x\"\u00e9\ud83d\ude00" , "n": -42, "f": 1.5, "b": true, "z": null, "o": {"p": [1, {"q": []}]} } "#)
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
}

import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("Base64URL", .ownThread)
struct Base64URLTests {
    @Test(
        "RFC 4648 §10 test vectors (no padding)",
        arguments: [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ])
    func vectors(plain: String, encoded: String) {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        #expect(Base64URL.encodedCount(byteCount: plain.utf8.count) == encoded.utf8.count)
    }

    @Test("uses '-' and '_' where standard base64 has '+' and '/'")
    func urlAlphabet() {
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")  // standard: "+/8="
        #expect(Base64URL.encode([0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFF, 0x00]) == "----____AA")
        #expect(Base64URL.decode("----____AA") == [0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFF, 0x00])
    }

    @Test("accepts correct padding")
    func padding() {
        #expect(Base64URL.decode("Zg==") == Array("f".utf8))
        #expect(Base64URL.decode("Zm8=") == Array("fo".utf8))
        #expect(Base64URL.decode("Zm9v") == Array("foo".utf8))
    }

    @Test(
        "rejects what is not canonical base64url",
        arguments: [
            "Zm9v+", "Zm9v/", "Z", "Zm9vY", "Zh", "Zm9", "Zg=", "Zg===", "Z===", "====", "Zm 9v", "Zm9v\n", "Zg=a",
            "=Zg=",
        ])
    func rejects(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test("round-trips every length from 0 to 99")
    func roundTrip() {
        var generator = APNsIDGenerator(seed: 99)
        for length in 0..<100 {
            let bytes = TestSupport.randomBytes(length, generator: &generator)
            let encoded = Base64URL.encode(bytes)
            #expect(encoded.utf8.count == Base64URL.encodedCount(byteCount: length))
            #expect(!encoded.contains("="))
            #expect(Base64URL.decode(encoded) == bytes)
            var buffer = [UInt8](repeating: 0, count: encoded.utf8.count)
            let written = bytes.withUnsafeBytes { source in
                buffer.withUnsafeMutableBytes { Base64URL.encode(source, to: $0.baseAddress!) }
            }
            #expect(written == buffer.count)
            #expect(buffer == Array(encoded.utf8))
        }
    }
}

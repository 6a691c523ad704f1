import FanfareTestSupport
import Foundation
import Testing

@testable import FanfareCore

@Suite("Base64", .ownThread)
struct Base64Tests {
    @Test(
        "RFC 4648 §10 test vectors (no padding)",
        arguments: [
            ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ])
    func vectors(plain: String, encoded: String) {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
        #expect(Base64.decode(encoded) == Array(plain.utf8))
        #expect(Base64.encodedCount(byteCount: plain.utf8.count) == encoded.utf8.count)
    }

    @Test("uses '-' and '_' where standard base64 has '+' and '/'")
    func urlAlphabet() {
        #expect(Base64.encode([0xFB, 0xFF]) == "-_8")  // standard: "+/8="
        #expect(Base64.encode([0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFF, 0x00]) == "----____AA")
        #expect(Base64.decode("----____AA") == [0xFB, 0xEF, 0xBE, 0xFF, 0xFF, 0xFF, 0x00])
    }

    @Test("accepts correct padding")
    func padding() {
        #expect(Base64.decode("Zg==") == Array("f".utf8))
        #expect(Base64.decode("Zm8=") == Array("fo".utf8))
        #expect(Base64.decode("Zm9v") == Array("foo".utf8))
    }

    @Test(
        "rejects what is not canonical base64url",
        arguments: [
            "Zm9v+", "Zm9v/", "Z", "Zm9vY", "Zh", "Zm9", "Zg=", "Zg===", "Z===", "====", "Zm 9v", "Zm9v\n", "Zg=a",
            "=Zg=",
        ])
    func rejects(text: String) {
        #expect(Base64.decode(text) == nil)
    }

    @Test("round-trips every length from 0 to 99")
    func roundTrip() {
        var generator = APNsIDGenerator(seed: 99)
        for length in 0..<100 {
            let bytes = TestSupport.randomBytes(length, generator: &generator)
            let encoded = Base64.encode(bytes)
            #expect(encoded.utf8.count == Base64.encodedCount(byteCount: length))
            #expect(!encoded.contains("="))
            #expect(Base64.decode(encoded) == bytes)
            var buffer = [UInt8](repeating: 0, count: encoded.utf8.count)
            let written = bytes.withUnsafeBytes { source in
                buffer.withUnsafeMutableBytes { Base64.encode(source, to: $0.baseAddress!) }
            }
            #expect(written == buffer.count)
            #expect(buffer == Array(encoded.utf8))
        }
    }

    // From FanfareTLS's JWT codec, now this one with `padding: .forbidden`.

    @Test("matches Foundation's base64 with the URL alphabet for every length from 0 to 69")
    func matchesFoundationForAllLengths() {
        var bytes: [UInt8] = []
        for length in 0..<70 {
            let encoded = Base64.encode(bytes)
            let expected = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            #expect(encoded == expected, "length \(length)")
            #expect(Base64.decode(encoded, padding: .forbidden) == bytes)
            bytes.append(UInt8(truncatingIfNeeded: length &* 97 &+ 251))
        }
    }

    @Test("JWT segments: no padding, no foreign characters, no non-canonical tails")
    func rejectsPaddingForeignCharactersAndNonCanonicalTails() {
        #expect(Base64.decode("QQ==", padding: .forbidden) == nil)
        #expect(Base64.decode("a+b/", padding: .forbidden) == nil)
        #expect(Base64.decode("A", padding: .forbidden) == nil)
        #expect(Base64.decode("QR", padding: .forbidden) == nil)  // "QQ" is canonical for "A"; "QR" has stray bits
        #expect(Base64.decode("QQ", padding: .forbidden) == [0x41])
        #expect(Array("QQ".utf8).withUnsafeBytes { Base64.decode($0, padding: .forbidden) } == [0x41])
    }

    // From the simulator's channel ids and its allocation-free JWT section decoder.

    @Test("standard alphabet with padding, as APNs writes channel ids")
    func standardAlphabetWithPadding() {
        #expect(Base64.encode([0xFB, 0xFF], alphabet: .standard, padded: true) == "+/8=")
        #expect(Base64.encode(Array("f".utf8), alphabet: .standard, padded: true) == "Zg==")
        #expect(Base64.encode(Array("foo".utf8), alphabet: .standard, padded: true) == "Zm9v")
        #expect(Base64.decode("+/8=", alphabet: .standard) == [0xFB, 0xFF])
        #expect(Base64.decode("-_8", alphabet: .standard) == nil)
        #expect(Base64.decode("+/8") == nil)
        var generator = APNsIDGenerator(seed: 16)
        for length in 0..<40 {
            let bytes = TestSupport.randomBytes(length, generator: &generator)
            let encoded = Base64.encode(bytes, alphabet: .standard, padded: true)
            #expect(encoded == Data(bytes).base64EncodedString())
            #expect(encoded.utf8.count == Base64.encodedCount(byteCount: length, padded: true))
            #expect(Base64.decode(encoded, alphabet: .standard) == bytes)
        }
    }

    @Test("decodes into a buffer: the count, nil without room, and tails the caller chose to accept")
    func decodesIntoABuffer() {
        var output = [UInt8](repeating: 0, count: 6)
        func decode(_ text: String, room: Int = 6, canonicalOnly: Bool = true) -> [UInt8]? {
            let count = Array(text.utf8).withUnsafeBytes { input in
                output.withUnsafeMutableBytes { buffer in
                    Base64.decode(
                        input, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<room]), padding: .forbidden,
                        canonicalOnly: canonicalOnly)
                }
            }
            return count.map { Array(output[0..<$0]) }
        }
        #expect(decode("Zm9vYmFy") == Array("foobar".utf8))
        #expect(decode("Zm9vYmFy", room: 5) == nil)
        #expect(decode("Zm9vYg", room: 4) == Array("foob".utf8))
        #expect(decode("Zm9vYg", room: 3) == nil)
        #expect(Base64.decodedCapacity(encodedCount: 6) == 4)
        #expect(decode("QR") == nil)
        #expect(decode("QR", canonicalOnly: false) == [0x41])
        #expect(decode("Zg==") == nil)
    }
}

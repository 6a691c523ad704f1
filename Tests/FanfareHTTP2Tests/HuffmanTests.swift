import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK Huffman encoder and decoder", .ownThread)
struct HuffmanTests {
    typealias Support = HPACKTestSupport

    @Test(
        "encodes the RFC 7541 Appendix C.4 and C.6 strings",
        arguments: [
            ("www.example.com", "f1e3 c2e5 f23a 6ba0 ab90 f4ff"), ("no-cache", "a8eb 1064 9cbf"),
            ("custom-key", "25a8 49e9 5ba9 7d7f"), ("custom-value", "25a8 49e9 5bb8 e8b4 bf"), ("302", "6402"),
            ("private", "aec3 771a 4b"),
            ("Mon, 21 Oct 2013 20:13:21 GMT", "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff"),
            ("https://www.example.com", "9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3"), ("307", "640e ff"),
            ("gzip", "9bd9 ab"),
            (
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                "94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07"
            ),
        ])
    func rfcStrings(text: String, hex: String) throws {
        let expected = Support.bytes(hex: hex)
        #expect(Support.hex(Support.huffmanEncode(Array(text.utf8))) == Support.hex(expected))
        let bits = Array(text.utf8).withUnsafeBytes { HPACKHuffman.bitCount($0) }
        #expect(HPACKHuffman.byteCount(bitCount: bits) == expected.count)
        #expect(try Support.huffmanDecode(expected) == Array(text.utf8))
    }

    @Test("round-trips random bytes of every value and every length up to 300")
    func randomRoundTrip() throws {
        var generator = SeededGenerator(seed: 7541)
        for length in 0...300 {
            let bytes = Support.randomBytes(length, using: &generator)
            let encoded = Support.huffmanEncode(bytes)
            #expect(try Support.huffmanDecode(encoded) == bytes, "length \(length)")
        }
        let everyValue = (0...255).map { UInt8($0) }
        for rotation in 0..<8 {
            let bytes = Array(everyValue[rotation...] + everyValue[..<rotation])
            #expect(try Support.huffmanDecode(Support.huffmanEncode(bytes)) == bytes)
        }
    }

    @Test("round-trips hex, UUID and base64url text, shorter than the text")
    func textRoundTrip() throws {
        var generator = SeededGenerator(seed: 42)
        let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for _ in 0..<200 {
            let token = Support.randomBytes(Int.random(in: 1...100, using: &generator), using: &generator)
            let hex = Array(Support.hex(token).utf8)
            let uuid = Array(Support.hex(Support.randomBytes(16, using: &generator)).utf8)
            var uuidText = [UInt8]()
            for (index, digit) in uuid.enumerated() {
                if [8, 12, 16, 20].contains(index) { uuidText.append(UInt8(ascii: "-")) }
                uuidText.append(digit)
            }
            let jwt = (0..<Int.random(in: 1...200, using: &generator)).map { _ in
                base64URL.randomElement(using: &generator)!
            }
            for text in [hex, uuidText, jwt] {
                #expect(try Support.huffmanDecode(Support.huffmanEncode(text)) == text)
            }
            // Hex digits take 5 or 6 bits.
            #expect(Support.huffmanEncode(hex).count <= (hex.count * 6 + 7) / 8)
            #expect(Support.huffmanEncode(uuidText).count < uuidText.count)
        }
    }

    @Test("appendHex(of:) writes exactly what encoding the hex text writes, mixed with other symbols")
    func appendHex() throws {
        var generator = SeededGenerator(seed: 16)
        for length in 0...120 {
            let bytes = Support.randomBytes(length, using: &generator)
            let prefix = Array("/3/device/".utf8)
            let expected = Support.huffmanEncode(prefix + Array(Support.hex(bytes).utf8) + [UInt8(ascii: "?")])
            let bits =
                prefix.withUnsafeBytes { HPACKHuffman.bitCount($0) }
                + bytes.withUnsafeBytes { HPACKHuffman.bitCount(hexOf: $0) }
                + Int(HuffmanCode.bitLengths[Int(UInt8(ascii: "?"))])
            var output = [UInt8](repeating: 0xAA, count: expected.count + 8)
            let written = output.withUnsafeMutableBytes { destination in
                var writer = HuffmanBitWriter(destination: destination.baseAddress!)
                prefix.withUnsafeBytes { writer.append($0) }
                bytes.withUnsafeBytes { writer.appendHex(of: $0) }
                writer.append(UInt8(ascii: "?"))
                return writer.finish()
            }
            #expect(written == expected.count)
            #expect(Array(output[0..<written]) == expected, "length \(length)")
            #expect(output[written...].allSatisfy { $0 == 0xAA }, "wrote past the end")
            #expect(HPACKHuffman.byteCount(bitCount: bits) == expected.count)
            let hexBits = bytes.withUnsafeBytes { HPACKHuffman.bitCount(hexOf: $0) }
            #expect(hexBits == Array(Support.hex(bytes).utf8).withUnsafeBytes { HPACKHuffman.bitCount($0) })
        }
    }

    @Test("appendHexWithSlack(of:) writes what appendHex(of:) writes, after any prefix, and stays within its slack")
    func appendHexWithSlack() throws {
        var generator = SeededGenerator(seed: 48)
        for length in 0...120 {
            for prefixLength in [0, 1, 3, 10, 23] {
                let bytes = Support.randomBytes(length, using: &generator)
                let prefix = Support.randomBytes(prefixLength, using: &generator)
                func encode(wide: Bool) -> [UInt8] {
                    var output = [UInt8](repeating: 0xAA, count: 2 * (prefixLength * 4 + length * 2) + 32)
                    let written = output.withUnsafeMutableBytes { destination in
                        var writer = HuffmanBitWriter(destination: destination.baseAddress!)
                        prefix.withUnsafeBytes { writer.append($0) }
                        bytes.withUnsafeBytes { wide ? writer.appendHexWithSlack(of: $0) : writer.appendHex(of: $0) }
                        writer.append(UInt8(ascii: "?"))
                        return writer.finish()
                    }
                    // Slack stores may leave bytes behind, but never more than 8 past the string.
                    #expect(output[(written + 8)...].allSatisfy { $0 == 0xAA }, "wrote past the slack")
                    return Array(output[0..<written])
                }
                #expect(encode(wide: true) == encode(wide: false), "length \(length), prefix \(prefixLength)")
            }
        }
    }

    @Test("the writer goes on after finish() with a new string")
    func consecutiveStrings() throws {
        var output = [UInt8](repeating: 0, count: 64)
        let (first, total) = output.withUnsafeMutableBytes { destination in
            var writer = HuffmanBitWriter(destination: destination.baseAddress!)
            writer.append(UInt8(ascii: "a"))
            let first = writer.finish()
            Array("no-cache".utf8).withUnsafeBytes { writer.append($0) }
            return (first, writer.finish())
        }
        #expect(first == 1)
        #expect(Array(output[0..<total]) == [0x1F] + Support.bytes(hex: "a8eb 1064 9cbf"))
    }

    @Test(
        "rejects EOS, padding over 7 bits and padding that is not all ones",
        arguments: [
            "ffff ffff",  // EOS (30 ones) and 2 more
            "ffff fffc",  // EOS then a zero
            "1fff ffff ff",  // 'a' then EOS
            "ff",  // 8 bits of padding, no symbol
            "07ff",  // '0' (5 bits) then 11 one-bits
            "18",  // 'a' (00011) then 000 padding
            "1e",  // 'a' then 110 padding
            "f1e3 c2e5 f23a 6ba0 ab90 f4fe",  // www.example.com with a zero in the padding
        ])
    func rejects(hex: String) {
        #expect(throws: HPACKError.invalidHuffman) { try Support.huffmanDecode(Support.bytes(hex: hex)) }
    }

    @Test("accepts the empty string and 1...7 bits of one-padding")
    func acceptsPadding() throws {
        #expect(try Support.huffmanDecode([]) == [])
        #expect(try Support.huffmanDecode([0x1F]) == Array("a".utf8))  // 00011 111
        #expect(try Support.huffmanDecode([0x07]) == Array("0".utf8))  // 00000 111
        #expect(try Support.huffmanDecode([0x00, 0x3F]) == Array("00".utf8))  // 00000 00000 111111
        #expect(try Support.huffmanDecode([0x00, 0x7F]) == Array("01".utf8))  // 00000 00001 111111
        #expect(try Support.huffmanDecode([0xFE, 0x01]) == Array("!0".utf8))  // 1111111000 00000 1 (10 + 5 + 1)
    }

    @Test("refuses to write past the destination")
    func destinationTooSmall() throws {
        let encoded = Support.huffmanEncode(Array("www.example.com".utf8))
        #expect(throws: HPACKError.destinationTooSmall) { try Support.huffmanDecode(encoded, capacity: 14) }
        #expect(try Support.huffmanDecode(encoded, capacity: 15) == Array("www.example.com".utf8))
    }
}

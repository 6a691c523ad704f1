import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

/// Long never-indexed Huffman values are kept decoded between blocks (HPACKRepeatedValues): what comes out must
/// be exactly what a fresh decode gives, whichever values repeat, change or fail.
@Suite("HPACK decoder: repeated long values", .ownThread)
struct HPACKRepeatedValueTests {
    typealias Support = HPACKTestSupport

    /// An integer with an N-bit prefix whose high bits are `flags` (RFC 7541 §5.1).
    static func integer(_ value: Int, prefixBits: Int, flags: UInt8) -> [UInt8] {
        let mask = 1 << prefixBits - 1
        if value < mask { return [flags | UInt8(value)] }
        var bytes = [flags | UInt8(mask)]
        var rest = value - mask
        while rest >= 128 {
            bytes.append(UInt8(rest & 0x7F) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
        return bytes
    }

    /// A literal never indexed (§6.2.3) with a literal name, the value Huffman-coded (or `encodedValue` as is).
    static func neverIndexed(_ name: String, _ value: String, encodedValue: [UInt8]? = nil) -> [UInt8] {
        let encoded = encodedValue ?? Support.huffmanEncode(Array(value.utf8))
        return [0x10] + integer(name.utf8.count, prefixBits: 7, flags: 0) + Array(name.utf8)
            + integer(encoded.count, prefixBits: 7, flags: 0x80) + encoded
    }

    static let token =
        "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ.eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNzY0MDAwMDAwfQ."
        + String(repeating: "MEUCIQDx7k9Zq", count: 8)

    static func path(_ number: Int) -> String {
        "/3/device/" + String(repeating: String(number, radix: 16), count: 64 / String(number, radix: 16).count + 1)
    }

    @Test("a value repeated between changing ones decodes the same every time")
    func repeatedAndChangingValues() throws {
        var decoder = HPACKDecoder()
        for number in 1...40 {
            // The path changes every block, the token repeats; every third block adds a third long value that
            // pushes out the least recently used one.
            var fields = [Header(":path", Self.path(number)), Header("authorization", "bearer " + Self.token)]
            if number % 3 == 0 { fields.append(Header("x-long", String(repeating: "z\(number)", count: 40))) }
            let block = fields.flatMap {
                Self.neverIndexed(String(decoding: $0.name, as: UTF8.self), String(decoding: $0.value, as: UTF8.self))
            }
            #expect(try Support.decode(&decoder, block) == fields, "block \(number)")
        }
    }

    @Test("two values of the same encoded length are told apart by their octets")
    func sameLengthDifferentValues() throws {
        var decoder = HPACKDecoder()
        let first = String(repeating: "a", count: 90)
        let second = String(repeating: "a", count: 89) + "b"
        #expect(Support.huffmanEncode(Array(first.utf8)).count == Support.huffmanEncode(Array(second.utf8)).count)
        for value in [first, second, first, first, second] {
            #expect(try Support.decode(&decoder, Self.neverIndexed("x", value)) == [Header("x", value)])
        }
    }

    @Test("an invalid code in a kept-length value is an error, as it is for a short one")
    func invalidHuffmanIsRefused() {
        // 60 octets of ones: EOS (30 ones) inside the string.
        let block = Self.neverIndexed("x", "", encodedValue: [UInt8](repeating: 0xFF, count: 60))
        #expect(Support.decodeError(block) == .invalidHuffman)
    }

    @Test("a kept value longer than the header list allows is refused")
    func keptValueOverTheLimit() {
        let value = String(repeating: "0123456789", count: 12)
        let block = Self.neverIndexed("x", value)
        #expect(Support.decodeError(block, maximumHeaderListSize: 100) != nil)
        #expect(Support.decodeError(block, maximumHeaderListSize: 1000) == nil)
    }
}

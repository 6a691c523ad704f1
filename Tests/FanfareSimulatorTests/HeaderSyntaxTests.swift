import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct HeaderSyntaxTests {
    /// The word-at-a-time hex check agrees with a byte-by-byte reference for every byte at every position
    /// of a 17-byte string (two full words and a tail byte).
    @Test func hexCheckAgreesWithTheReferenceForEveryByte() {
        func reference(_ byte: UInt8) -> Bool {
            (48...57).contains(byte) || (97...102).contains(byte) || (65...70).contains(byte)
        }
        var text = Array("0123456789abcdefA".utf8)
        for position in 0..<text.count {
            let original = text[position]
            for value in 0...255 {
                text[position] = UInt8(value)
                let result = text.withUnsafeBytes { HeaderSyntax.isHex($0) }
                if result != reference(UInt8(value)) {
                    Issue.record("byte \(value) at \(position): got \(result)")
                }
            }
            text[position] = original
        }
    }

    @Test func topicAlphabetAgreesWithTheReferenceForEveryByte() {
        func reference(_ byte: UInt8) -> Bool {
            (48...57).contains(byte) || (97...122).contains(byte) || (65...90).contains(byte) || byte == 45
                || byte == 46
        }
        for value in 0...255 {
            let result = [UInt8(ascii: "a"), UInt8(value)].withUnsafeBytes { HeaderSyntax.isTopicSyntax($0) }
            #expect(result == reference(UInt8(value)), "byte \(value)")
        }
        #expect(![UInt8]().withUnsafeBytes { HeaderSyntax.isTopicSyntax($0) })
    }

    @Test func integersAndBase64() {
        #expect(withBytes("0") { HeaderSyntax.parseNonNegativeInteger($0) } == 0)
        #expect(withBytes("9223372036854775807") { HeaderSyntax.parseNonNegativeInteger($0) } == Int64.max)
        #expect(withBytes("9223372036854775808") { HeaderSyntax.parseNonNegativeInteger($0) } == nil)
        #expect(withBytes("") { HeaderSyntax.parseNonNegativeInteger($0) } == nil)
        #expect(withBytes("dGVzdA==") { HeaderSyntax.isBase64($0) })
        #expect(withBytes("dGVzdA") { HeaderSyntax.isBase64($0) })
        #expect(withBytes("a-_b") { HeaderSyntax.isBase64($0) })
        #expect(!withBytes("dGVzdA=") { HeaderSyntax.isBase64($0) })
        #expect(!withBytes("dG=VzdA=") { HeaderSyntax.isBase64($0) })
        #expect(!withBytes("a b") { HeaderSyntax.isBase64($0) })
    }

    @Test func decimalWriterHandlesExtremes() {
        var buffer = [UInt8](repeating: 0, count: 24)
        for value in [Int64.min, -1, 0, 7, 1_750_000_000_123, Int64.max] {
            let count = buffer.withUnsafeMutableBytes { DecimalWriter.write(value, into: $0, at: 0) }
            #expect(String(decoding: buffer[0..<count], as: UTF8.self) == String(value))
        }
    }

    @Test func deviceTokenSetIsCaseInsensitiveAndExact() {
        let set = DeviceTokenSet(hexTokens: ["ABCDEF0123", "abcdef0123", "ff", ""])
        #expect(set.count == 2)
        #expect(withBytes("abcdef0123") { set.contains($0) })
        #expect(withBytes("ABCDEF0123") { set.contains($0) })
        #expect(withBytes("FF") { set.contains($0) })
        #expect(!withBytes("abcdef012") { set.contains($0) })
        #expect(!withBytes("abcdef01234") { set.contains($0) })
        #expect(!withBytes("") { set.contains($0) })
        let many = DeviceTokenSet(hexTokens: (0..<5000).map { Fixtures.hexToken(bytes: 32, seed: $0) })
        #expect(many.count == 5000)
        #expect(
            (0..<5000).allSatisfy { seed in withBytes(Fixtures.hexToken(bytes: 32, seed: seed)) { many.contains($0) } })
        #expect(!withBytes(Fixtures.hexToken(bytes: 32, seed: 5001)) { many.contains($0) })
    }
}

import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("SHA-1", .ownThread)
struct SHA1Tests {
    static func digest(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { SHA1.hash($0) }.description
    }

    /// The test message of `count` bytes: byte i is (7 i + 3) mod 256.
    static func pattern(_ count: Int) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    }

    @Test("FIPS 180 examples: empty, \"abc\", the 448-bit and 896-bit messages, a million \"a\"")
    func fipsVectors() {
        #expect(Self.digest([]) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(Self.digest(Array("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(
            Self.digest(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(
            Self.digest(
                Array(
                    ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                        + "klmnopqrlmnopqrsmnopqrstnopqrstu").utf8))
                == "a49b2446a02c645bf419f995b67091253a04a259")
        #expect(
            Self.digest([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
                == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    // Python: hashlib.sha1(bytes((i * 7 + 3) & 0xff for i in range(n))).hexdigest()
    @Test(
        "lengths around the padding boundaries (55/56: the length fits or not; 63/64/65: a block full or not)",
        arguments: [
            (1, "9842926af7ca0a8cca12604f945414f07b01e13d"),
            (55, "ddf57317ef34bfee3b6df83d359098930eb278bc"),
            (56, "a0d492bb0fc889d0eca3bc137066ab6f4f74f369"),
            (57, "11a02dcf95859677a62e75024067c22b165d890f"),
            (63, "c55856749bef509bdfe6bfebfc7bf4e793e82132"),
            (64, "bede92be29c3874e1b54ddc77988d606fc857a8e"),
            (65, "b05a80522b053d6dc7e0a517d0e70212c7dad11f"),
            (119, "504e27376a6e0f0dba8295b85cb25dc4dfa17d23"),
            (120, "82134b02fb3f702491be9bed581eeab59334acb2"),
            (127, "34d5e582029e9b9b85b2febe31da3db7cdabaaea"),
            (128, "a09133e6730ffe899efb70204cb5646cd5dc24ee"),
            (129, "808aea332ce367541d37adae7f94e59c5c1a934e"),
            (200, "892b673ca3c696ab13ab8aab3cf3abfbc3aaeb3b"),
        ])
    func paddingBoundaries(length: Int, expected: String) {
        #expect(Self.digest(Self.pattern(length)) == expected)
    }

    @Test("a message fed in two or three pieces, cut anywhere, hashes as in one piece")
    func pieces() {
        let message = Self.pattern(200)
        for length in [0, 1, 55, 56, 64, 65, 129, 200] {
            let whole = Self.digest(Array(message[0..<length]))
            for cut in 0...length {
                var hasher = SHA1()
                message.withUnsafeBytes { bytes in
                    hasher.update(UnsafeRawBufferPointer(rebasing: bytes[0..<cut / 2]))
                    hasher.update(UnsafeRawBufferPointer(rebasing: bytes[cut / 2..<cut]))
                    hasher.update(UnsafeRawBufferPointer(rebasing: bytes[cut..<length]))
                }
                #expect(hasher.finalize().description == whole, "length \(length), cuts \(cut / 2), \(cut)")
            }
        }
    }

    @Test("update(bigEndian:) appends the 8 bytes most significant first")
    func bigEndianWord() {
        var hasher = SHA1()
        hasher.update(bigEndian: 0x0102_0304_0506_0708)
        #expect(hasher.finalize() == [UInt8]([1, 2, 3, 4, 5, 6, 7, 8]).withUnsafeBytes { SHA1.hash($0) })
    }
}

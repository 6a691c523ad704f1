import FanfareCore
import FanfareTestSupport
import Testing

@testable import FanfareTLS

/// OpenSSL's SHA-1 (`Digest.sha1`, what a wave push's apns-id is hashed with) against FanfareCore's pure-Swift
/// `SHA1`, which stays the reference: it is checked against the standard's vectors in FanfareCoreTests.
@Suite("SHA-1 through OpenSSL, checked against the pure-Swift reference", .ownThread)
struct SHA1DigestTests {
    @Test("FIPS 180-4 examples: abc and the two-block message")
    func knownAnswers() {
        let abc = Array("abc".utf8)
        let digest = abc.withUnsafeBytes { Digest.sha1($0, UnsafeRawBufferPointer(start: nil, count: 0)) }
        #expect(digest.description == "a9993e364706816aba3e25717850c26c9cd0d89d")
        let long = Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)
        // Split anywhere, the message is the same.
        for split in [0, 1, 27, 55, 56] {
            let digest = long.withUnsafeBytes { all in
                Digest.sha1(
                    UnsafeRawBufferPointer(rebasing: all[0..<split]), UnsafeRawBufferPointer(rebasing: all[split...]))
            }
            #expect(digest.description == "84983e441c3bd26ebaae4aa1f95129e5e54670f1", "split at \(split)")
        }
    }

    @Test("the same digest as the pure-Swift SHA1 for every length across three blocks and any split")
    func matchesReference() {
        var random = SplitMix64(seed: 13)
        for length in 0...200 {
            let message = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let split = length == 0 ? 0 : Int(random.next() % UInt64(length + 1))
            message.withUnsafeBytes { all in
                let reference = SHA1.hash(all)
                let first = UnsafeRawBufferPointer(rebasing: all[0..<split])
                let second = UnsafeRawBufferPointer(rebasing: all[split...])
                #expect(Digest.sha1(first, second) == reference, "length \(length), split \(split)")
            }
        }
    }
}

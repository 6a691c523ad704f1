import COpenSSL
import FanfareCore

/// SHA-256 and a constant-time comparison, through OpenSSL (for API keys and request fingerprints), and SHA-1
/// for name-based UUIDs.
public enum Digest {
    /// SHA-1 of `first` then `second` (one message), through OpenSSL's low-level SHA-1 (SHA-NI on CPUs that have
    /// it: about 4 times FanfareCore's pure-Swift `SHA1`, docs/performance.md). No allocation, lock or syscall: a
    /// wave push's apns-id is computed with it. Falls back to `SHA1` when this OpenSSL lacks the low-level
    /// functions (built without the 3.0-deprecated API); both give the same digest (tests check them against
    /// each other).
    public static func sha1(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> SHA1.Digest {
        var bytes: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 20 bytes of digest, 4 spare
        let done = withUnsafeMutableBytes(of: &bytes) { digest in
            capns_sha1_two(
                first.baseAddress, first.count, second.baseAddress, second.count,
                digest.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        guard done == 1 else {
            var hasher = SHA1()
            hasher.update(first)
            hasher.update(second)
            return hasher.finalize()
        }
        return withUnsafeBytes(of: &bytes) { digest in
            func word(_ index: Int) -> UInt32 {
                UInt32(bigEndian: digest.loadUnaligned(fromByteOffset: 4 * index, as: UInt32.self))
            }
            return SHA1.Digest(words: (word(0), word(1), word(2), word(3), word(4)))
        }
    }

    /// The SHA-256 of `bytes` (32 bytes).
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let done = digest.withUnsafeMutableBufferPointer { out in
            EVP_Digest(bytes.baseAddress, bytes.count, out.baseAddress, &length, EVP_sha256(), nil)
        }
        // One-shot SHA-256 fails only when OpenSSL cannot allocate; there is no answer to return then.
        precondition(done == 1 && length == 32, "EVP_Digest(SHA-256) failed")
        return digest
    }

    public static func sha256(_ bytes: some Sequence<UInt8>) -> [UInt8] {
        let array = Array(bytes)
        return array.withUnsafeBytes { sha256($0) }
    }

    /// Whether two byte strings are equal, in time that depends only on their lengths (not on where they
    /// differ): for comparing secrets.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { left in
            b.withUnsafeBytes { right in
                CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0
            }
        }
    }
}

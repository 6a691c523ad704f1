import COpenSSL

/// SHA-256 and a constant-time comparison, through OpenSSL (for API keys and request fingerprints).
public enum Digest {
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
        return a.withUnsafeBytes { left in b.withUnsafeBytes { right in
            CRYPTO_memcmp(left.baseAddress, right.baseAddress, a.count) == 0
        } }
    }
}

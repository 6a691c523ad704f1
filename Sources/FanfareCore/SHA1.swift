/// SHA-1 (FIPS 180-4 §6.1) in pure Swift, with no allocation: the state, the partial block and the message
/// schedule live inline.
///
/// Only for name-based UUIDs (RFC 9562 §5.5 names SHA-1; see ``NameBasedUUID``), never for anything that needs
/// collision resistance. Pure Swift, so FanfareCore stays free of C and the id can be checked here against the
/// standard's vectors. It is the reference: a wave push's id, computed per push, hashes with OpenSSL's `SHA1_*`
/// instead (FanfareTLS `Digest.sha1`, SHA-NI on CPUs that have it, about 4 times faster per id;
/// docs/performance.md has both), and tests check the two give the same digests.
public struct SHA1: Sendable {
    /// A 20-byte SHA-1 digest as five big-endian words (`h0` first).
    public struct Digest: Sendable, Equatable, CustomStringConvertible {
        public var words: (UInt32, UInt32, UInt32, UInt32, UInt32)

        public init(words: (UInt32, UInt32, UInt32, UInt32, UInt32)) {
            self.words = words
        }

        public static func == (lhs: Digest, rhs: Digest) -> Bool {
            lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1 && lhs.words.2 == rhs.words.2
                && lhs.words.3 == rhs.words.3 && lhs.words.4 == rhs.words.4
        }

        /// The 20 bytes in order. Allocates (tests, control plane).
        public var bytes: [UInt8] {
            let words = [self.words.0, self.words.1, self.words.2, self.words.3, self.words.4]
            return words.flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (24 - 8 * $0)) } }
        }

        /// Lowercase hex, 40 digits. Allocates.
        public var description: String {
            bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        }
    }

    public static let blockByteCount = 64

    @usableFromInline var state: (UInt32, UInt32, UInt32, UInt32, UInt32) =
        (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
    /// The bytes of the block being filled (the first `buffered`).
    @usableFromInline var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (
        0, 0, 0, 0, 0, 0, 0, 0
    )
    @usableFromInline var buffered = 0
    /// Message length in bytes so far; wraps like the standard's 64-bit bit count (a message of 2^61 bytes or
    /// more is out of SHA-1's domain, and wrapping keeps any caller from trapping us).
    @usableFromInline var length: UInt64 = 0

    public init() {}

    /// The digest of `bytes`.
    public static func hash(_ bytes: UnsafeRawBufferPointer) -> Digest {
        var hasher = SHA1()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// Appends `bytes` to the message.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var source = bytes.baseAddress, bytes.count > 0 else { return }
        var remaining = bytes.count
        length &+= UInt64(truncatingIfNeeded: remaining)
        if buffered > 0 {
            let taken = min(remaining, Self.blockByteCount - buffered)
            let offset = buffered
            Swift.withUnsafeMutableBytes(of: &block) {
                ($0.baseAddress! + offset).copyMemory(from: source, byteCount: taken)
            }
            buffered += taken
            source += taken
            remaining -= taken
            guard buffered == Self.blockByteCount else { return }
            compressBufferedBlock()
        }
        while remaining >= Self.blockByteCount {
            Self.compress(&state, block: source)
            source += Self.blockByteCount
            remaining -= Self.blockByteCount
        }
        if remaining > 0 {
            Swift.withUnsafeMutableBytes(of: &block) { $0.baseAddress!.copyMemory(from: source, byteCount: remaining) }
            buffered = remaining
        }
    }

    /// Appends `value` as 8 bytes, most significant first.
    public mutating func update(bigEndian value: UInt64) {
        var bytes = value.bigEndian
        Swift.withUnsafeBytes(of: &bytes) { update($0) }
    }

    /// Pads the message (0x80, zeros, the bit length) and returns the digest.
    public consuming func finalize() -> Digest {
        let bitLength = length &<< 3
        let offset = buffered
        Swift.withUnsafeMutableBytes(of: &block) { bytes in
            bytes[offset] = 0x80
            (bytes.baseAddress! + offset + 1).initializeMemory(
                as: UInt8.self, repeating: 0, count: Self.blockByteCount - offset - 1)
        }
        if offset + 1 > Self.blockByteCount - 8 {  // no room for the length: it goes in one more block
            compressBufferedBlock()
            block = (0, 0, 0, 0, 0, 0, 0, 0)
        }
        block.7 = bitLength.bigEndian
        compressBufferedBlock()
        return Digest(words: state)
    }

    private mutating func compressBufferedBlock() {
        var copy = block
        Swift.withUnsafeBytes(of: &copy) { Self.compress(&state, block: $0.baseAddress!) }
        buffered = 0
    }

    /// One 64-byte block into `state`. The 80-word schedule is on the stack (320 bytes).
    static func compress(_ state: inout (UInt32, UInt32, UInt32, UInt32, UInt32), block: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { schedule in
            let w = schedule.baseAddress!
            for t in 0..<16 {
                w[t] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: 4 &* t, as: UInt32.self))
            }
            for t in 16..<80 {
                w[t] = (w[t &- 3] ^ w[t &- 8] ^ w[t &- 14] ^ w[t &- 16]).rotated(1)
            }
            var (a, b, c, d, e) = state
            for t in 0..<20 {
                let temp = a.rotated(5) &+ ((b & c) | (~b & d)) &+ e &+ 0x5A82_7999 &+ w[t]
                (e, d, c, b, a) = (d, c, b.rotated(30), a, temp)
            }
            for t in 20..<40 {
                let temp = a.rotated(5) &+ (b ^ c ^ d) &+ e &+ 0x6ED9_EBA1 &+ w[t]
                (e, d, c, b, a) = (d, c, b.rotated(30), a, temp)
            }
            for t in 40..<60 {
                let temp = a.rotated(5) &+ ((b & c) | (b & d) | (c & d)) &+ e &+ 0x8F1B_BCDC &+ w[t]
                (e, d, c, b, a) = (d, c, b.rotated(30), a, temp)
            }
            for t in 60..<80 {
                let temp = a.rotated(5) &+ (b ^ c ^ d) &+ e &+ 0xCA62_C1D6 &+ w[t]
                (e, d, c, b, a) = (d, c, b.rotated(30), a, temp)
            }
            state.0 &+= a
            state.1 &+= b
            state.2 &+= c
            state.3 &+= d
            state.4 &+= e
        }
    }
}

extension UInt32 {
    @inline(__always)
    fileprivate func rotated(_ count: UInt32) -> UInt32 {
        (self << count) | (self >> (32 - count))
    }
}

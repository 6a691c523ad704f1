import FanfareCore

/// A 64-bit hash of every byte of a token: the token index's probe start, and the order waves visit an
/// audience in (`WaveWalk`). Checkpoints name walk positions by it, so it is part of the stored format:
/// **never change it** (a database written by one version is resumed by the next).
enum TokenHash {
    @inline(__always)
    static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0x243F_6A88_85A3_08D3 ^ UInt64(bytes.count)
        var offset = 0
        while offset + 8 <= bytes.count {
            hash =
                (hash ^ UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
                &* 0x9E37_79B9_7F4A_7C15
            hash ^= hash >> 29
            offset += 8
        }
        while offset < bytes.count {
            hash = (hash ^ UInt64(bytes[offset])) &* 0x100_0000_01B3
            offset += 1
        }
        // murmur3's finalizer: every input bit reaches every output bit.
        hash ^= hash >> 33
        hash &*= 0xFF51_AFD7_ED55_8CCD
        hash ^= hash >> 33
        hash &*= 0xC4CE_B9FE_1A85_EC53
        hash ^= hash >> 33
        return hash
    }

    @inline(__always)
    static func of(_ token: DeviceToken) -> UInt64 { token.withUnsafeBytes { of($0) } }
}

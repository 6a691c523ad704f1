import FanfareCore

/// A small deterministic PRNG (xoshiro256**, seeded through SplitMix64) so that a run with the same
/// `seed` injects the same faults and latencies. One instance per worker thread; not thread-safe.
public struct SimulatorRandom: RandomNumberGenerator, Sendable {
    private var s0: UInt64
    private var s1: UInt64
    private var s2: UInt64
    private var s3: UInt64

    /// `stream` separates workers that share a seed (worker index), so they draw different sequences.
    public init(seed: UInt64, stream: UInt64 = 0) {
        var mixer = SplitMix64(seed: seed ^ (stream &* 0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
        s0 = mixer.next()
        s1 = mixer.next()
        s2 = mixer.next()
        s3 = mixer.next()
        assert(s0 | s1 | s2 | s3 != 0, "xoshiro state must not be all zero")
    }

    public mutating func next() -> UInt64 {
        let result = (s1 &* 5).rotatedLeft(by: 7) &* 9
        let t = s1 << 17
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = s3.rotatedLeft(by: 45)
        return result
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    public mutating func nextUnitInterval() -> Double {
        Double(next() >> 11) * 0x1p-53
    }
}

extension UInt64 {
    fileprivate func rotatedLeft(by amount: UInt64) -> UInt64 {
        (self << amount) | (self >> (64 - amount))
    }
}

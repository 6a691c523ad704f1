/// SplitMix64: a whole run follows from its seed, so a failing seed replays exactly.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A whole number in `range`.
    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }

    /// True with probability `percent` / 100.
    mutating func chance(_ percent: Int) -> Bool { int(0...99) < percent }

    /// One of `items` (not empty).
    mutating func pick<T>(_ items: [T]) -> T { items[int(0...items.count - 1)] }

    /// An index chosen by weight (the weights need not add up to anything in particular).
    mutating func weighted(_ weights: [Int]) -> Int {
        var roll = int(0...weights.reduce(0, +) - 1)
        for (index, weight) in weights.enumerated() {
            if roll < weight { return index }
            roll -= weight
        }
        return weights.count - 1
    }
}

/// `apns-id` request ids: random version-4 UUIDs in canonical lowercase form (apns-spec §2.1).
///
/// One generator per worker; not thread-safe. It is seeded once from the system generator (one
/// syscall) and then uses xoshiro256** — fast, no syscalls, no allocation. Ids only need to be
/// unique, not unpredictable. A copy of a generator repeats the original's ids, so do not copy one
/// to share it: give each worker its own `APNsIDGenerator()`.
public struct APNsIDGenerator: Sendable {
    /// Length of the canonical form `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`.
    public static let byteCount = 36

    @usableFromInline var state: (UInt64, UInt64, UInt64, UInt64)

    /// Seeds from `SystemRandomNumberGenerator`.
    public init() {
        var system = SystemRandomNumberGenerator()
        self.init(state: (system.next(), system.next(), system.next(), system.next()))
    }

    /// A reproducible generator (tests, simulations): the seed is expanded with SplitMix64.
    public init(seed: UInt64) {
        var mix = seed
        func splitMix() -> UInt64 {
            mix &+= 0x9E37_79B9_7F4A_7C15
            var z = mix
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        self.init(state: (splitMix(), splitMix(), splitMix(), splitMix()))
    }

    init(state: (UInt64, UInt64, UInt64, UInt64)) {
        self.state = state
        if state == (0, 0, 0, 0) { self.state.0 = 1 }  // the all-zero state would only ever yield zeros
    }

    /// The next 64 random bits (xoshiro256**).
    @inlinable
    public mutating func next() -> UInt64 {
        let result = (state.1 &* 5).rotatedLeft(by: 7) &* 9
        let shifted = state.1 << 17
        state.2 ^= state.0
        state.3 ^= state.1
        state.1 ^= state.2
        state.0 ^= state.3
        state.2 ^= shifted
        state.3 = state.3.rotatedLeft(by: 45)
        return result
    }

    /// Writes a fresh id, exactly ``byteCount`` bytes, to `destination`.
    @inlinable
    public mutating func write(to destination: UnsafeMutableRawPointer) {
        // UUID bytes 0-7 are `high` big-endian, 8-15 `low`. Version 4: the top nibble of byte 6.
        // RFC 4122 variant: the top two bits of byte 8 are 10.
        let high = next() & ~0xF000 | 0x4000
        let low = next() & ~(0xC0 << 56) | (0x80 << 56)
        Self.writeHex(high, nibbles: 0..<8, to: destination)
        destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 8, as: UInt8.self)
        Self.writeHex(high, nibbles: 8..<12, to: destination + 9)
        destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 13, as: UInt8.self)
        Self.writeHex(high, nibbles: 12..<16, to: destination + 14)
        destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 18, as: UInt8.self)
        Self.writeHex(low, nibbles: 0..<4, to: destination + 19)
        destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 23, as: UInt8.self)
        Self.writeHex(low, nibbles: 4..<16, to: destination + 24)
    }

    /// A fresh id as a `String` (control plane; allocates).
    public mutating func nextString() -> String {
        String(unsafeUninitializedCapacity: Self.byteCount) { buffer in
            write(to: UnsafeMutableRawPointer(buffer.baseAddress!))
            return Self.byteCount
        }
    }

    /// Writes nibbles `nibbles` of `value` (0 = most significant) as lowercase hex.
    @inlinable
    static func writeHex(_ value: UInt64, nibbles: Range<Int>, to destination: UnsafeMutableRawPointer) {
        assert(nibbles.lowerBound >= 0 && nibbles.upperBound <= 16)
        var out = 0
        for nibbleIndex in nibbles {
            let nibble = UInt8(truncatingIfNeeded: value >> UInt64(60 - 4 * nibbleIndex)) & 0x0F
            let digit = nibble < 10 ? nibble &+ UInt8(ascii: "0") : nibble &+ (UInt8(ascii: "a") &- 10)
            destination.storeBytes(of: digit, toByteOffset: out, as: UInt8.self)
            out += 1
        }
    }

    /// True for the canonical 8-4-4-4-12 form with hex digits of either case (what APNs accepts as
    /// `apns-id`; the version and variant digits are not checked).
    public static func isValidAPNsID(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count == byteCount else { return false }
        for (index, byte) in bytes.enumerated() {
            switch index {
            case 8, 13, 18, 23:
                guard byte == UInt8(ascii: "-") else { return false }
            default:
                guard DeviceToken.nibble(byte) != nil else { return false }
            }
        }
        return true
    }

    public static func isValidAPNsID(_ text: some StringProtocol) -> Bool {
        var text = String(text)
        return text.withUTF8 { isValidAPNsID(UnsafeRawBufferPointer($0)) }
    }
}

extension UInt64 {
    @inlinable
    func rotatedLeft(by count: UInt64) -> UInt64 {
        (self << count) | (self >> (64 - count))
    }
}

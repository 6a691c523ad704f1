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
        var mix = SplitMix64(seed: seed)
        self.init(state: (mix.next(), mix.next(), mix.next(), mix.next()))
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
        Self.writeCanonical(high: high, low: low, to: destination)
    }

    /// Writes the canonical lowercase 8-4-4-4-12 text of the UUID whose bytes 0-7 are `high` and 8-15 `low`
    /// (each big-endian), exactly ``byteCount`` bytes, to `destination`. Random and name-based ids share it.
    @inlinable
    public static func writeCanonical(high: UInt64, low: UInt64, to destination: UnsafeMutableRawPointer) {
        // The 32 digits side by side, then cut into 8-4-4-4-12 around the hyphens.
        var digits: (UInt64, UInt64, UInt64, UInt64) = (
            hexDigits(UInt32(truncatingIfNeeded: high >> 32)), hexDigits(UInt32(truncatingIfNeeded: high)),
            hexDigits(UInt32(truncatingIfNeeded: low >> 32)), hexDigits(UInt32(truncatingIfNeeded: low))
        )
        withUnsafeBytes(of: &digits) { hex in
            let source = hex.baseAddress!
            destination.copyMemory(from: source, byteCount: 8)
            destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 8, as: UInt8.self)
            (destination + 9).copyMemory(from: source + 8, byteCount: 4)
            destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 13, as: UInt8.self)
            (destination + 14).copyMemory(from: source + 12, byteCount: 4)
            destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 18, as: UInt8.self)
            (destination + 19).copyMemory(from: source + 16, byteCount: 4)
            destination.storeBytes(of: UInt8(ascii: "-"), toByteOffset: 23, as: UInt8.self)
            (destination + 24).copyMemory(from: source + 20, byteCount: 12)
        }
    }

    /// The 8 lowercase hex digits of `value`, most significant first in memory order, computed in one
    /// register (no per-digit branch): the nibbles are spread one per byte, then `'0'` is added to each and
    /// 39 more to those ≥ 10 (`'a'` − `'0'` − 10).
    @inlinable
    static func hexDigits(_ value: UInt32) -> UInt64 {
        var spread = UInt64(value)
        spread = (spread | spread << 16) & 0x0000_FFFF_0000_FFFF
        spread = (spread | spread << 8) & 0x00FF_00FF_00FF_00FF
        spread = (spread | spread << 4) & 0x0F0F_0F0F_0F0F_0F0F
        let letters = ((spread &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101
        let ascii = spread &+ 0x3030_3030_3030_3030 &+ letters &* 39
        return ascii.bigEndian  // byte 7 holds the first digit: store it first
    }

    /// A fresh id as a `String` (control plane; allocates).
    public mutating func nextString() -> String {
        String(unsafeUninitializedCapacity: Self.byteCount) { buffer in
            write(to: UnsafeMutableRawPointer(buffer.baseAddress!))
            return Self.byteCount
        }
    }

    /// True for the canonical 8-4-4-4-12 form with hex digits of either case (what APNs accepts as
    /// `apns-id`; the version and variant digits are not checked), or lowercase only when `requireLowercase`.
    /// Branch-free per digit: every request the simulator answers runs through this.
    public static func isValidAPNsID(_ bytes: UnsafeRawBufferPointer, requireLowercase: Bool = false) -> Bool {
        guard bytes.count == byteCount else { return false }
        let hyphen = UInt8(ascii: "-")
        guard bytes[8] == hyphen, bytes[13] == hyphen, bytes[18] == hyphen, bytes[23] == hyphen else { return false }
        // Each digit's class: bit 0 = digit or a-f, bit 1 = digit, a-f or A-F. AND over all 32 digits.
        var classes: UInt8 = 0b11
        @inline(__always)
        func digits(_ range: Range<Int>) {
            for index in range {
                let byte = bytes[index]
                let lower: UInt8 = (byte &- 0x30 < 10 ? 1 : 0) | (byte &- 0x61 < 6 ? 1 : 0)
                let upper: UInt8 = byte &- 0x41 < 6 ? 1 : 0
                classes &= lower | (lower | upper) << 1
            }
        }
        digits(0..<8)
        digits(9..<13)
        digits(14..<18)
        digits(19..<23)
        digits(24..<36)
        return classes & (requireLowercase ? 0b01 : 0b10) != 0
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

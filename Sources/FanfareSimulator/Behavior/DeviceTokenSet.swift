/// Hashes a hex token case-insensitively, eight bytes at a time. Case folding is `| 0x20`, which maps
/// `A-F` to `a-f` and leaves `0-9` alone — exact for hex digits, the only tokens that get this far.
/// A 64-bit finaliser spreads the bits so the low bits used for table slots are well mixed.
@inline(__always)
func deviceTokenHash(_ token: UnsafeRawBufferPointer) -> UInt64 {
    let multiplier: UInt64 = 0x9FB2_1C65_1E98_DF25
    var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(token.count)
    var index = 0
    while index + 8 <= token.count {
        let word = token.loadUnaligned(fromByteOffset: index, as: UInt64.self) | 0x2020_2020_2020_2020
        hash = ((hash << 29) | (hash >> 35)) ^ word
        hash &*= multiplier
        index += 8
    }
    while index < token.count {
        hash = ((hash << 29) | (hash >> 35)) ^ UInt64(token[index] | 0x20)
        hash &*= multiplier
        index += 1
    }
    hash ^= hash >> 33
    hash &*= 0xFF51_AFD7_ED55_8CCD
    hash ^= hash >> 33
    hash &*= 0xC4CE_B9FE_1A85_EC53
    hash ^= hash >> 33
    return hash
}

/// The set of device tokens that "exist" (`SimulatorConfiguration.knownTokens`), built once at start-up
/// and shared read-only by all workers. Lookups hash the token text in place: no String, no allocation.
public final class DeviceTokenSet: @unchecked Sendable {
    // @unchecked: the storage is written only in init and read-only afterwards.
    private struct Entry {
        var hash: UInt64
        var offset: Int
        var count: Int  // 0 = empty slot
    }

    private let entries: UnsafeMutablePointer<Entry>
    private let mask: Int
    private let text: UnsafeMutableRawBufferPointer
    /// Distinct tokens in the set.
    public let count: Int

    /// Builds the set from hex strings (any case; compared case-insensitively). Empty strings are skipped;
    /// strings that are not hex can never match a request (whose token is checked to be hex first).
    public init<Tokens: Sequence>(hexTokens: Tokens) where Tokens.Element == String {
        var normalised = Set<String>()
        var textBytes = 0
        for token in hexTokens where !token.isEmpty {
            let lower = token.lowercased()
            if normalised.insert(lower).inserted { textBytes += lower.utf8.count }
        }
        var slots = 16
        while slots < normalised.count * 2 { slots <<= 1 }
        mask = slots - 1
        entries = .allocate(capacity: slots)
        entries.initialize(repeating: Entry(hash: 0, offset: 0, count: 0), count: slots)
        text = .allocate(byteCount: max(textBytes, 1), alignment: 1)
        count = normalised.count

        var offset = 0
        for token in normalised.sorted() {  // sorted: deterministic layout
            let bytes = Array(token.utf8)
            bytes.withUnsafeBytes { source in
                (text.baseAddress! + offset).copyMemory(from: source.baseAddress!, byteCount: source.count)
                let hash = deviceTokenHash(source)
                var slot = Int(truncatingIfNeeded: hash) & mask
                while entries[slot].count != 0 { slot = (slot + 1) & mask }
                entries[slot] = Entry(hash: hash, offset: offset, count: source.count)
            }
            offset += bytes.count
        }
        assert(offset == textBytes)
    }

    deinit {
        entries.deinitialize(count: mask + 1)
        entries.deallocate()
        text.deallocate()
    }

    /// Whether `token` (hex text, any case) is in the set.
    public func contains(_ token: UnsafeRawBufferPointer) -> Bool {
        guard token.count > 0 else { return false }
        let hash = deviceTokenHash(token)
        var slot = Int(truncatingIfNeeded: hash) & mask
        while true {
            let entry = entries[slot]
            if entry.count == 0 { return false }
            if entry.hash == hash, entry.count == token.count, matches(token, offset: entry.offset) { return true }
            slot = (slot + 1) & mask
        }
    }

    private func matches(_ token: UnsafeRawBufferPointer, offset: Int) -> Bool {
        for index in 0..<token.count where ASCII.lowercased(token[index]) != text[offset + index] {
            return false
        }
        return true
    }
}

import Glibc

/// Long Huffman-coded values the peer sends again and again without indexing them, kept decoded.
///
/// nghttp2 (h2load, curl) never indexes `authorization` and `:path`, so an APNs sender built on it sends the same
/// ~200-octet provider token Huffman-coded in every request; decoding it was the largest part of the simulator's
/// HPACK work. A value whose encoded octets equal a kept one's is handed out from here instead (a `memcmp`, not
/// ~400 table steps). Two entries, least recently used replaced: the token that repeats stays while the path,
/// which changes every request, takes the other. Memory is allocated once; not thread-safe (one per decoder).
struct HPACKRepeatedValues: ~Copyable {
    /// Values shorter than this (encoded) decode about as fast as they compare; longer ones are not kept.
    static let minimumEncodedLength = 48
    static let maximumEncodedLength = 512
    /// A Huffman code is at least 5 bits: the most octets `maximumEncodedLength` can decode to.
    static let maximumDecodedLength = maximumEncodedLength * 8 / 5

    private struct Entry {
        var encodedCount = 0
        var decodedCount = 0
        var lastUse: UInt64 = 0
    }

    private var entries = (Entry(), Entry())
    /// Per entry: `maximumEncodedLength` encoded octets, then `maximumDecodedLength` decoded ones.
    private let storage: UnsafeMutableRawBufferPointer
    private var clock: UInt64 = 0

    init() {
        storage = .allocate(byteCount: 2 * (Self.maximumEncodedLength + Self.maximumDecodedLength), alignment: 16)
    }

    deinit {
        storage.deallocate()
    }

    static func keeps(encodedLength: Int) -> Bool {
        encodedLength >= minimumEncodedLength && encodedLength <= maximumEncodedLength
    }

    private func encoded(_ slot: Int) -> UnsafeMutableRawBufferPointer {
        let start = slot * (Self.maximumEncodedLength + Self.maximumDecodedLength)
        return UnsafeMutableRawBufferPointer(rebasing: storage[start..<start + Self.maximumEncodedLength])
    }

    private func decoded(_ slot: Int) -> UnsafeMutableRawBufferPointer {
        let start = slot * (Self.maximumEncodedLength + Self.maximumDecodedLength) + Self.maximumEncodedLength
        return UnsafeMutableRawBufferPointer(rebasing: storage[start..<start + Self.maximumDecodedLength])
    }

    private func entry(_ slot: Int) -> Entry { slot == 0 ? entries.0 : entries.1 }

    private mutating func setEntry(_ slot: Int, _ entry: Entry) {
        if slot == 0 { entries.0 = entry } else { entries.1 = entry }
    }

    /// The decoded value of the Huffman string `encoded` (whose length `keeps`): from an entry with the same
    /// encoded octets, or decoded now into the least recently used entry. Valid until the next call.
    mutating func decode(_ encoded: UnsafeRawBufferPointer) throws(HPACKError) -> UnsafeRawBufferPointer {
        clock &+= 1
        for slot in 0..<2 {
            var candidate = entry(slot)
            guard candidate.encodedCount == encoded.count,
                memcmp(self.encoded(slot).baseAddress!, encoded.baseAddress!, encoded.count) == 0
            else { continue }
            candidate.lastUse = clock
            setEntry(slot, candidate)
            return UnsafeRawBufferPointer(rebasing: decoded(slot)[0..<candidate.decodedCount])
        }
        let slot = entries.0.lastUse <= entries.1.lastUse ? 0 : 1
        // Forgotten first: if decoding throws, the entry must not pair new octets with an old value.
        setEntry(slot, Entry())
        let decodedCount = try HPACKHuffmanDecoder.decode(encoded, into: decoded(slot))
        self.encoded(slot).copyMemory(from: encoded)
        setEntry(slot, Entry(encodedCount: encoded.count, decodedCount: decodedCount, lastUse: clock))
        return UnsafeRawBufferPointer(rebasing: decoded(slot)[0..<decodedCount])
    }
}

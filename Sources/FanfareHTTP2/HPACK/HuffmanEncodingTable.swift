/// Flat lookup tables for the Huffman encoder, derived once from `HuffmanCode` and never freed.
///
/// Immutable after the (thread-safe) lazy initialization of `shared`, so any thread may read them.
struct HuffmanEncodingTable: @unchecked Sendable {
    /// Per octet: code << 8 | bit length (codes are at most 30 bits, so this needs 38 bits).
    let symbols: UnsafePointer<UInt64>
    /// Per octet: the codes of its two lowercase hex digits, high digit first, combined: code << 8 | bit length.
    /// Hex digits take 5 or 6 bits, so a pair is at most 12 bits.
    let hexPairs: UnsafePointer<UInt32>

    static let shared = HuffmanEncodingTable()

    static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    private init() {
        let symbols = UnsafeMutablePointer<UInt64>.allocate(capacity: 256)
        for octet in 0..<256 {
            symbols[octet] = UInt64(HuffmanCode.codes[octet]) << 8 | UInt64(HuffmanCode.bitLengths[octet])
        }
        let hexPairs = UnsafeMutablePointer<UInt32>.allocate(capacity: 256)
        for octet in 0..<256 {
            let high = Int(Self.hexDigits[octet >> 4])
            let low = Int(Self.hexDigits[octet & 0xF])
            let lowLength = UInt32(HuffmanCode.bitLengths[low])
            let length = UInt32(HuffmanCode.bitLengths[high]) + lowLength
            let code = HuffmanCode.codes[high] << lowLength | HuffmanCode.codes[low]
            assert(length <= 12)
            hexPairs[octet] = code << 8 | length
        }
        self.symbols = UnsafePointer(symbols)
        self.hexPairs = UnsafePointer(hexPairs)
    }
}

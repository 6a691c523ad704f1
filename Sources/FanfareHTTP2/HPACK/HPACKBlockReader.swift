/// A cursor over one header block: integers (RFC 7541 §5.1) and string literals (§5.2).
struct HPACKBlockReader {
    /// Integers above this are rejected: no index, length or table size comes close.
    static let integerLimit = Int(Int32.max)

    private let bytes: UnsafeRawBufferPointer
    private(set) var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { offset >= bytes.count }

    /// The next octet, not consumed; the caller checked `isAtEnd`.
    @inline(__always)
    func peekByte() -> UInt8 {
        bytes[offset]
    }

    /// An integer with an N-bit prefix, starting at the current octet (whose high bits are ignored).
    mutating func readInteger(prefixBits: Int) throws(HPACKError) -> Int {
        guard offset < bytes.count else { throw .truncated }
        let mask = 1 &<< prefixBits - 1
        var value = Int(bytes[offset]) & mask
        offset += 1
        if value < mask { return value }
        var shift = 0
        while true {
            guard offset < bytes.count else { throw .truncated }
            let byte = Int(bytes[offset])
            offset += 1
            value += (byte & 0x7F) &<< shift
            guard value <= Self.integerLimit else { throw .integerOverflow }
            if byte & 0x80 == 0 { return value }
            shift += 7
            // 5 continuation octets carry 35 bits; more can only be padding with zero groups, which we refuse.
            guard shift <= 28 else { throw .integerOverflow }
        }
    }

    /// Steps over a string without decoding it; returns the most octets it can decode to (Huffman codes are
    /// at least 5 bits long), for the header-list size.
    mutating func skipString(maximumLength: Int) throws(HPACKError) -> Int {
        guard offset < bytes.count else { throw .truncated }
        let isHuffman = bytes[offset] & 0x80 != 0
        let length = try readInteger(prefixBits: 7)
        guard length <= bytes.count - offset else { throw .truncated }
        guard length <= maximumLength else { throw .stringTooLong(length) }
        offset += length
        return isHuffman ? length * 8 / 5 : length
    }

    /// A string literal: as-is, it is returned in place (valid as long as the block); Huffman-coded, it is
    /// decoded into `scratch`. Throws `.stringTooLong` for a string over `maximumLength` octets (sent or decoded).
    mutating func readString(
        scratch: UnsafeMutableRawBufferPointer, maximumLength: Int
    ) throws(HPACKError) -> UnsafeRawBufferPointer {
        let (encoded, isHuffman) = try readEncodedString(maximumLength: maximumLength)
        guard isHuffman else { return encoded }
        return try Self.decodeHuffman(encoded, scratch: scratch, maximumLength: maximumLength)
    }

    /// A string literal as sent (in place) and whether it is Huffman-coded.
    mutating func readEncodedString(
        maximumLength: Int
    ) throws(HPACKError) -> (encoded: UnsafeRawBufferPointer, isHuffman: Bool) {
        guard offset < bytes.count else { throw .truncated }
        let isHuffman = bytes[offset] & 0x80 != 0
        let length = try readInteger(prefixBits: 7)
        guard length <= bytes.count - offset else { throw .truncated }
        guard length <= maximumLength else { throw .stringTooLong(length) }
        let encoded = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
        offset += length
        return (encoded, isHuffman)
    }

    /// The Huffman string `encoded` decoded into `scratch`, at most `maximumLength` octets.
    static func decodeHuffman(
        _ encoded: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer, maximumLength: Int
    ) throws(HPACKError) -> UnsafeRawBufferPointer {
        let length = encoded.count
        let destination = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<min(scratch.count, maximumLength)])
        do {
            let decoded = try HPACKHuffmanDecoder.decode(encoded, into: destination)
            return UnsafeRawBufferPointer(rebasing: destination[0..<decoded])
        } catch .destinationTooSmall {
            throw .stringTooLong(length)
        }
    }
}

/// Decodes Huffman strings (RFC 7541 §5.2) a nibble at a time through `HuffmanDecodingTable`.
public enum HPACKHuffmanDecoder {
    /// Decodes `source` into `destination` and returns the number of octets written.
    /// Throws `.invalidHuffman` for EOS in the data or padding that is longer than 7 bits or not all ones, and
    /// `.destinationTooSmall` when the decoded string does not fit (at most `source.count * 8 / 5` octets).
    public static func decode(
        _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer
    ) throws(HPACKError) -> Int {
        guard !source.isEmpty else { return 0 }
        // No code is shorter than 5 bits; with room for that many octets plus one, every nibble may store its
        // (possibly unused) symbol unconditionally, which keeps the loop free of data-dependent branches.
        if let output = destination.baseAddress, destination.count > source.count * 8 / 5 {
            return try decodeWithoutBoundsChecks(source, into: output)
        }
        return try decodeCheckingBounds(source, into: destination)
    }

    /// Every transition stores its symbol at the current end (overwritten unless it emitted); the count advances
    /// by the emit bit. EOS sets the fail bit, which is checked once at the end (it resets to the root state).
    @inline(__always)
    private static func decodeWithoutBoundsChecks(
        _ source: UnsafeRawBufferPointer, into output: UnsafeMutableRawPointer
    ) throws(HPACKError) -> Int {
        let table = HuffmanDecodingTable.shared
        var written = 0
        var row = 0  // the current state's row offset
        var seen: UInt32 = 0  // OR of all transitions: for the fail bit
        var transition: UInt32 = 0
        /// One nibble: follow the transition, store its symbol unconditionally, count it only if emitted.
        @inline(__always)
        func step(_ nibble: UInt8) {
            transition = table.transition(rowOffset: row, nibble: Int(nibble))
            output.storeBytes(
                of: UInt8(truncatingIfNeeded: transition >> HuffmanDecodingTable.symbolShift), toByteOffset: written,
                as: UInt8.self)
            written &+= Int(truncatingIfNeeded: (transition >> HuffmanDecodingTable.emitShift) & 1)
            seen |= transition
            row = Int(truncatingIfNeeded: transition & HuffmanDecodingTable.rowOffsetMask)
        }
        for byte in source {
            step(byte >> 4)
            step(byte & 0x0F)
        }
        guard seen & HuffmanDecodingTable.fails == 0, transition & HuffmanDecodingTable.accepts != 0 else {
            throw .invalidHuffman
        }
        return written
    }

    /// For destinations that may be too small: checks before each stored symbol.
    private static func decodeCheckingBounds(
        _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer
    ) throws(HPACKError) -> Int {
        let table = HuffmanDecodingTable.shared
        var written = 0
        var row = 0
        var transition: UInt32 = 0
        for position in 0..<(source.count * 2) {
            let byte = source[position >> 1]
            let nibble = position & 1 == 0 ? byte >> 4 : byte & 0x0F
            transition = table.transition(rowOffset: row, nibble: Int(nibble))
            if transition & (HuffmanDecodingTable.emits | HuffmanDecodingTable.fails) != 0 {
                guard transition & HuffmanDecodingTable.fails == 0 else { throw .invalidHuffman }
                guard written < destination.count else { throw .destinationTooSmall }
                destination[written] = UInt8(truncatingIfNeeded: transition >> HuffmanDecodingTable.symbolShift)
                written += 1
            }
            row = Int(truncatingIfNeeded: transition & HuffmanDecodingTable.rowOffsetMask)
        }
        guard transition & HuffmanDecodingTable.accepts != 0 else { throw .invalidHuffman }
        return written
    }
}

/// Writes the representations of one header block (RFC 7541 §6) straight into caller memory.
///
/// The caller sizes the destination (`literalBound` helps); every write checks the capacity with a
/// precondition once, before it writes, so a short destination traps instead of corrupting memory.
/// Strings are Huffman-coded only when that is strictly shorter (decided with `HPACKHuffman.bitCount`).
/// Nothing is written past `capacity`; the up to 8 bytes after `count` may hold scratch from the hex fast
/// path (when the capacity leaves that room), overwritten by whatever is written next.
public struct HPACKBlockWriter {
    public let destination: UnsafeMutableRawPointer
    public let capacity: Int
    /// Octets written so far.
    public private(set) var count: Int = 0

    public init(destination: UnsafeMutableRawPointer, capacity: Int) {
        precondition(capacity >= 0)
        self.destination = destination
        self.capacity = capacity
    }

    /// The octets written so far.
    public var writtenBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: destination, count: count) }

    // MARK: Integers and strings (RFC 7541 §5)

    /// An integer with an N-bit prefix (RFC 7541 §5.1); `firstByteFlags` fills the bits above the prefix.
    public mutating func writeInteger(_ value: Int, prefixBits: Int, firstByteFlags: UInt8) {
        reserve(Self.integerLength(value, prefixBits: prefixBits))
        storeInteger(value, prefixBits: prefixBits, firstByteFlags: firstByteFlags)
    }

    /// Octets `writeInteger` takes for `value` with an N-bit prefix.
    @inline(__always)
    public static func integerLength(_ value: Int, prefixBits: Int) -> Int {
        precondition(value >= 0 && prefixBits >= 1 && prefixBits <= 8, "HPACK integer out of range")
        let limit = 1 &<< prefixBits - 1
        if value < limit { return 1 }
        var rest = value - limit
        var length = 2
        while rest >= 0x80 {
            rest &>>= 7
            length += 1
        }
        return length
    }

    /// Worst-case encoded size of a literal with this name/value length (for capacity checks): representation
    /// octet with an index up to 2^28, and both strings sent as-is (Huffman is used only when shorter).
    /// Pass `nameCount: 0` for a literal with an indexed name.
    public static func literalBound(nameCount: Int, valueCount: Int) -> Int {
        5 + stringBound(nameCount) + stringBound(valueCount)
    }

    /// Worst-case size of a string of `count` octets.
    public static func stringBound(_ count: Int) -> Int { integerLength(count, prefixBits: 7) + count }

    // MARK: Representations (RFC 7541 §6)

    /// Indexed header field (§6.1).
    public mutating func writeIndexed(_ index: Int) {
        assert(index > 0, "HPACK index 0 is not valid")
        if index < 0x7F {
            reserve(1)
            destination.storeBytes(of: 0x80 | UInt8(truncatingIfNeeded: index), toByteOffset: count, as: UInt8.self)
            count += 1
        } else {
            writeInteger(index, prefixBits: 7, firstByteFlags: 0x80)
        }
    }

    /// Literal header field without indexing, indexed name (§6.2.2). `huffman`: Huffman-code the value when
    /// that is shorter; `false` always sends it as-is.
    public mutating func writeLiteralWithoutIndexing(nameIndex: Int, value: UnsafeRawBufferPointer, huffman: Bool) {
        assert(nameIndex > 0, "HPACK index 0 is not valid")
        writeInteger(nameIndex, prefixBits: 4, firstByteFlags: 0x00)
        writeString(value, huffman: huffman)
    }

    /// Literal header field without indexing, new name (§6.2.2). The name must be lowercase.
    public mutating func writeLiteralWithoutIndexing(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        assert(Self.isLowercase(name), "HTTP/2 field names must be lowercase")
        reserve(1)
        storeByte(0x00)
        writeString(name, huffman: true)
        writeString(value, huffman: true)
    }

    /// Literal header field never indexed, new name (§6.2.3): values that differ on every block (ids). The
    /// name must be lowercase; both strings are Huffman-coded when that is shorter.
    public mutating func writeLiteralNeverIndexed(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        assert(Self.isLowercase(name), "HTTP/2 field names must be lowercase")
        reserve(1)
        storeByte(0x10)
        writeString(name, huffman: true)
        writeString(value, huffman: true)
    }

    /// A literal-without-indexing whose value is the Huffman code of `prefix` followed by the lowercase hex of
    /// `hexBytes` (for ":path" = "/3/device/" + hex token): no hex text is materialized.
    public mutating func writeLiteralWithoutIndexing(
        nameIndex: Int, valuePrefix: UnsafeRawBufferPointer, hexOf hexBytes: UnsafeRawBufferPointer
    ) {
        assert(nameIndex > 0, "HPACK index 0 is not valid")
        writeInteger(nameIndex, prefixBits: 4, firstByteFlags: 0x00)
        let plainCount = valuePrefix.count + 2 * hexBytes.count
        let huffmanCount = HPACKHuffman.byteCount(
            bitCount: HPACKHuffman.bitCount(valuePrefix) + HPACKHuffman.bitCount(hexOf: hexBytes))
        if huffmanCount < plainCount {
            reserve(Self.integerLength(huffmanCount, prefixBits: 7) + huffmanCount)
            storeInteger(huffmanCount, prefixBits: 7, firstByteFlags: 0x80)
            var bits = HuffmanBitWriter(destination: destination + count)
            bits.append(valuePrefix)
            if capacity - count >= huffmanCount + 8 {
                bits.appendHexWithSlack(of: hexBytes)  // room for its 8-byte stores: the fast path
            } else {
                bits.appendHex(of: hexBytes)
            }
            let written = bits.finish()
            assert(written == huffmanCount)
            count += written
        } else {
            // Only for tiny values: hex digits take 5-6 bits, so Huffman is shorter for any real token.
            reserve(Self.integerLength(plainCount, prefixBits: 7) + plainCount)
            storeInteger(plainCount, prefixBits: 7, firstByteFlags: 0x00)
            storeBytes(valuePrefix)
            for byte in hexBytes {
                storeByte(HuffmanEncodingTable.hexDigits[Int(byte >> 4)])
                storeByte(HuffmanEncodingTable.hexDigits[Int(byte & 0x0F)])
            }
        }
    }

    /// Literal header field with incremental indexing, indexed name (§6.2.1); value Huffman-coded when shorter.
    public mutating func writeLiteralWithIncrementalIndexing(nameIndex: Int, value: UnsafeRawBufferPointer) {
        assert(nameIndex > 0, "HPACK index 0 is not valid")
        writeInteger(nameIndex, prefixBits: 6, firstByteFlags: 0x40)
        writeString(value, huffman: true)
    }

    /// Literal header field with incremental indexing, new name (§6.2.1). The name must be lowercase.
    public mutating func writeLiteralWithIncrementalIndexing(
        name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer
    ) {
        assert(Self.isLowercase(name), "HTTP/2 field names must be lowercase")
        reserve(1)
        storeByte(0x40)
        writeString(name, huffman: true)
        writeString(value, huffman: true)
    }

    /// Dynamic table size update (§6.3).
    public mutating func writeTableSizeUpdate(_ size: Int) {
        writeInteger(size, prefixBits: 5, firstByteFlags: 0x20)
    }

    /// Pre-encoded bytes.
    public mutating func writeRaw(_ bytes: UnsafeRawBufferPointer) {
        reserve(bytes.count)
        storeBytes(bytes)
    }

    // MARK: Internals

    /// A string literal (§5.2), Huffman-coded if `huffman` and that is strictly shorter.
    mutating func writeString(_ bytes: UnsafeRawBufferPointer, huffman: Bool) {
        if huffman {
            let huffmanCount = HPACKHuffman.byteCount(bitCount: HPACKHuffman.bitCount(bytes))
            if huffmanCount < bytes.count {
                reserve(Self.integerLength(huffmanCount, prefixBits: 7) + huffmanCount)
                storeInteger(huffmanCount, prefixBits: 7, firstByteFlags: 0x80)
                var bits = HuffmanBitWriter(destination: destination + count)
                bits.append(bytes)
                let written = bits.finish()
                assert(written == huffmanCount)
                count += written
                return
            }
        }
        reserve(Self.stringBound(bytes.count))
        storeInteger(bytes.count, prefixBits: 7, firstByteFlags: 0x00)
        storeBytes(bytes)
    }

    @inline(__always)
    private func reserve(_ byteCount: Int) {
        precondition(byteCount <= capacity - count, "HPACK block exceeds the destination capacity")
    }

    /// Writes without a capacity check (the caller reserved).
    @inline(__always)
    private mutating func storeInteger(_ value: Int, prefixBits: Int, firstByteFlags: UInt8) {
        let limit = 1 &<< prefixBits - 1
        if value < limit {
            storeByte(firstByteFlags | UInt8(truncatingIfNeeded: value))
            return
        }
        storeByte(firstByteFlags | UInt8(truncatingIfNeeded: limit))
        var rest = value - limit
        while rest >= 0x80 {
            storeByte(0x80 | UInt8(truncatingIfNeeded: rest & 0x7F))
            rest &>>= 7
        }
        storeByte(UInt8(truncatingIfNeeded: rest))
    }

    @inline(__always)
    private mutating func storeByte(_ byte: UInt8) {
        destination.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    @inline(__always)
    private mutating func storeBytes(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        (destination + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }

    static func isLowercase(_ name: UnsafeRawBufferPointer) -> Bool {
        !name.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }
    }
}

/// Decodes header blocks from the peer (RFC 7541 §3, §6): every representation, Huffman strings, dynamic table
/// size updates and eviction.
///
/// Memory is allocated once in `init`: the dynamic table's arena (twice `maximumTableSize`) and scratch for
/// Huffman-decoded strings. Strings sent as-is are handed out in place. One decoder per connection; not
/// thread-safe. Any error leaves the dynamic table out of step with the peer, so the decoder refuses further use.
public struct HPACKDecoder: ~Copyable {
    /// Strings longer than this (as sent or decoded) are refused, so scratch space stays bounded.
    public static let maximumStringLength = 16 * 1024

    private var table: HPACKDecoderTable
    /// The SETTINGS_HEADER_TABLE_SIZE we advertise (after acknowledgement): size updates above it are errors.
    public private(set) var maximumTableSize: Int
    /// Set when we lowered our setting below the table's maximum: the next block must start with an update at
    /// most this large.
    private var requiredTableSizeUpdate: Int?
    public let maximumHeaderListSize: Int
    private let stringLimit: Int
    /// Huffman-decoded names (also names copied out of the table while it changes), then values.
    private let nameScratch: UnsafeMutableRawBufferPointer
    private let valueScratch: UnsafeMutableRawBufferPointer
    private var failed = false
    /// Long not-indexed Huffman values kept decoded, for peers that send the same one in every block.
    private var repeatedValues = HPACKRepeatedValues()

    /// `maximumTableSize`: the SETTINGS_HEADER_TABLE_SIZE we advertise (4096 is the protocol default).
    /// `maximumHeaderListSize`: the SETTINGS_MAX_HEADER_LIST_SIZE we advertise (name + value + 32 per field).
    public init(maximumTableSize: Int = 4096, maximumHeaderListSize: Int = 64 * 1024) {
        precondition(maximumHeaderListSize >= 0)
        table = HPACKDecoderTable(capacity: maximumTableSize)
        self.maximumTableSize = maximumTableSize
        self.maximumHeaderListSize = maximumHeaderListSize
        stringLimit = min(Self.maximumStringLength, maximumHeaderListSize)
        nameScratch = .allocate(byteCount: max(stringLimit, maximumTableSize, 1), alignment: 16)
        valueScratch = .allocate(byteCount: max(stringLimit, 1), alignment: 16)
    }

    deinit {
        nameScratch.deallocate()
        valueScratch.deallocate()
    }

    /// Lowers (or restores, up to the initial value) the table size we advertise, once the peer acknowledged the
    /// SETTINGS carrying it. If it is below the current maximum, the next block must begin with a size update.
    public mutating func setMaximumTableSize(_ size: Int) {
        precondition(size >= 0 && size <= table.capacity, "cannot grow beyond the initial maximumTableSize")
        maximumTableSize = size
        if size < table.maximumSize {
            requiredTableSizeUpdate = min(requiredTableSizeUpdate ?? size, size)
            table.setMaximumSize(size)
        }
    }

    /// The dynamic table's current maximum size (set by the peer's size updates) and its content, for tests.
    var dynamicTableMaximumSize: Int { table.maximumSize }
    var dynamicTableSize: Int { table.size }
    var dynamicTableCount: Int { table.count }
    func dynamicTableEntry(_ position: Int) -> (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        table.entry(position)
    }

    /// Decodes one complete header block, calling `field(name, value)` for each field in order. The buffers passed to
    /// `field` are valid only during the call. Throws on any malformed input; after a throw the decoder is unusable
    /// (connection error).
    public mutating func decode(
        _ block: UnsafeRawBufferPointer,
        _ field: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws(HPACKError) -> Void
    ) throws(HPACKError) {
        try decode(block, wantsValue: { _ in true }, field)
    }

    /// `decode(_:_:)` for a caller that needs only some fields: a literal that is not indexed and whose name
    /// `wantsValue` refuses is stepped over without Huffman-decoding its value, and `field` is not called for
    /// it. (An APNs client needs only `:status`; decoding each response's `apns-id` was ~7 % of its CPU.)
    /// Such a skipped value is not checked for a valid Huffman code.
    public mutating func decode(
        _ block: UnsafeRawBufferPointer,
        wantsValue: (UnsafeRawBufferPointer) -> Bool,
        _ field: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws(HPACKError) -> Void
    ) throws(HPACKError) {
        precondition(!failed, "HPACKDecoder used after a decoding error")
        failed = true
        var reader = HPACKBlockReader(block)
        var listSize = 0
        var fieldSeen = false
        while !reader.isAtEnd {
            let first = reader.peekByte()
            if first & 0xE0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first field.
                guard !fieldSeen else { throw .tableSizeUpdateNotAtStart }
                try updateTableSize(&reader)
                continue
            }
            guard requiredTableSizeUpdate == nil else { throw .tableSizeUpdateMissing }
            fieldSeen = true

            let name: UnsafeRawBufferPointer
            let value: UnsafeRawBufferPointer
            let indexing: Bool
            if first & 0x80 != 0 {
                // Indexed header field (§6.1).
                (name, value) = try lookup(try reader.readInteger(prefixBits: 7))
                indexing = false
            } else {
                // Literal with incremental indexing (§6.2.1, 6-bit prefix), without indexing (§6.2.2) or never
                // indexed (§6.2.3) (4-bit prefixes).
                indexing = first & 0x40 != 0
                name = try readLiteralName(&reader, indexing: indexing)
                if !indexing && !wantsValue(name) {
                    listSize +=
                        name.count + (try reader.skipString(maximumLength: stringLimit))
                        + HPACKEncoderTable.entryOverhead
                    guard listSize <= maximumHeaderListSize else { throw .headerListTooLarge }
                    continue
                }
                value = try readLiteralValue(&reader, indexing: indexing)
            }

            listSize += name.count + value.count + HPACKEncoderTable.entryOverhead
            guard listSize <= maximumHeaderListSize else { throw .headerListTooLarge }
            try field(name, value)
            if indexing { table.insert(name: name, value: value) }
        }
        // An empty block still owes the size update (RFC 7541 §4.2: the first block after the change).
        guard requiredTableSizeUpdate == nil else { throw .tableSizeUpdateMissing }
        failed = false
    }

    /// A dynamic table size update (§6.3): at most what we advertise, and at most the size our lowered setting
    /// requires of this block.
    @inline(__always)
    private mutating func updateTableSize(_ reader: inout HPACKBlockReader) throws(HPACKError) {
        let size = try reader.readInteger(prefixBits: 5)
        guard size <= min(maximumTableSize, requiredTableSizeUpdate ?? .max) else {
            throw .tableSizeUpdateTooLarge(size)
        }
        requiredTableSizeUpdate = nil
        table.setMaximumSize(size)
    }

    /// A literal's name: indexed (a 6-bit prefix when the literal is indexed, else 4 bits) or a string.
    @inline(__always)
    private func readLiteralName(
        _ reader: inout HPACKBlockReader, indexing: Bool
    ) throws(HPACKError) -> UnsafeRawBufferPointer {
        let nameIndex = try reader.readInteger(prefixBits: indexing ? 6 : 4)
        if nameIndex == 0 {
            return try reader.readString(scratch: nameScratch, maximumLength: stringLimit)
        }
        let indexedName = try lookup(nameIndex).name
        guard indexing && table.contains(indexedName.baseAddress) else { return indexedName }
        // Inserting may evict this very entry and move the arena (RFC 7541 §4.4).
        nameScratch.copyMemory(from: indexedName)
        return UnsafeRawBufferPointer(rebasing: nameScratch[0..<indexedName.count])
    }

    /// A literal's value: in place when sent as-is, else Huffman-decoded into scratch (or kept decoded, when it
    /// is a long value never indexed).
    @inline(__always)
    private mutating func readLiteralValue(
        _ reader: inout HPACKBlockReader, indexing: Bool
    ) throws(HPACKError) -> UnsafeRawBufferPointer {
        let (encoded, isHuffman) = try reader.readEncodedString(maximumLength: stringLimit)
        if !isHuffman { return encoded }
        if HPACKRepeatedValues.keeps(encodedLength: encoded.count) && !indexing {
            // Indexed values are sent as an index next time; only those never indexed repeat as literals.
            let value = try repeatedValues.decode(encoded)
            guard value.count <= stringLimit else { throw .stringTooLong(encoded.count) }
            return value
        }
        return try HPACKBlockReader.decodeHuffman(encoded, scratch: valueScratch, maximumLength: stringLimit)
    }

    /// The entry at a 1-based index into the static then the dynamic table.
    @inline(__always)
    private func lookup(
        _ index: Int
    ) throws(HPACKError) -> (name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        if index >= 1 && index <= HPACKStaticTable.count {
            let entry = HPACKStaticTable.entry(index)
            return (entry.name, entry.value)
        }
        let position = index - HPACKStaticTable.count - 1
        guard position >= 0 && position < table.count else { throw .invalidIndex(index) }
        return table.entry(position)
    }
}

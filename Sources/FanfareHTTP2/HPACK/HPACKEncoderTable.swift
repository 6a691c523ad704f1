/// A handle to a field registered with an `HPACKEncoderTable`.
public struct HPACKCachedField: Hashable, Sendable {
    let slot: Int32
}

/// The encoder's dynamic table (RFC 7541 §2.3.2, §4) for a fixed set of repeated header fields.
///
/// Only fields registered here are ever inserted, so the table is a FIFO of our own entries: each insertion gets
/// the next sequence number, the live entries are exactly the sequence numbers from `oldestSequence` on, and an
/// entry's index is 62 + the number of entries inserted after it. Each field's literal representations are
/// encoded once at registration (and on `update`), so sending a field is an index or a memcpy.
/// One table per connection; not thread-safe.
public struct HPACKEncoderTable: ~Copyable {
    /// RFC 7541 §4.1: an entry's size is its name and value octets plus 32.
    public static let entryOverhead = 32
    /// The maximum a decoder applies until told otherwise (SETTINGS_HEADER_TABLE_SIZE's initial value).
    public static let defaultDecoderMaximum = 4096

    private struct Field {
        /// Literal with incremental indexing (inserts the field).
        var insertingLiteral: UnsafeMutableRawBufferPointer
        /// Literal without indexing (when the entry can never fit).
        var plainLiteral: UnsafeMutableRawBufferPointer
        var entrySize: Int
        /// Sequence number of the entry holding the current value, or -1 (never, or value changed since).
        var sequence: Int
        var nameIndex: Int?
        var name: UnsafeMutableRawBufferPointer
    }

    private var fields: [Field] = []

    /// The most this table ever uses, whatever the peer allows.
    public let capacity: Int
    /// The size the peer's decoder currently applies: the last size update we sent (initially 4096).
    private var decoderMaximum = Self.defaultDecoderMaximum
    /// The peer's SETTINGS_HEADER_TABLE_SIZE.
    private var peerMaximum = Self.defaultDecoderMaximum
    /// The lowest SETTINGS_HEADER_TABLE_SIZE since the last block, if any setting arrived since.
    private var lowestPeerMaximum: Int?
    /// Entries are evicted to stay within this: min(decoder maximum, every setting since the last block, capacity).
    public private(set) var limit: Int

    /// Entry sizes by sequence number (mod the ring size); holds every live entry since each is >= 32 octets.
    private let entrySizes: UnsafeMutablePointer<Int32>
    private let ringMask: Int
    private var nextSequence = 0
    private var oldestSequence = 0
    /// Sum of the live entries' sizes.
    public private(set) var size = 0

    public init(maximumSize: Int = 4096) {
        precondition(maximumSize >= 0 && maximumSize <= 1 << 30, "HPACK table size out of range")
        capacity = maximumSize
        limit = min(maximumSize, Self.defaultDecoderMaximum)
        var ringSize = 1
        while ringSize <= maximumSize / Self.entryOverhead { ringSize <<= 1 }
        ringMask = ringSize - 1
        entrySizes = .allocate(capacity: ringSize)
        entrySizes.initialize(repeating: 0, count: ringSize)
    }

    deinit {
        for field in fields {
            field.insertingLiteral.deallocate()
            field.plainLiteral.deallocate()
            field.name.deallocate()
        }
        entrySizes.deallocate()
    }

    /// Entries currently in the table (ours; the peer's decoder may hold older ones we no longer reference).
    public var entryCount: Int { nextSequence - oldestSequence }

    /// Registers a field to be sent indexed once inserted; returns its handle. Copies name and value.
    /// `nameIndex` is the static table index of the name; when nil, the static table is searched for the name.
    /// The name must be lowercase.
    public mutating func register(nameIndex: Int?, name: String, value: String) -> HPACKCachedField {
        precondition(fields.count < Int(Int32.max))
        let nameIndex = nameIndex ?? HPACKStaticTable.index(name: name)
        if let nameIndex {
            precondition(HPACKStaticTable.entry(nameIndex).nameString == name, "nameIndex does not name \(name)")
        }
        let nameBytes = Self.copy(Array(name.utf8))
        let (inserting, plain) = Self.encodeLiterals(nameIndex: nameIndex, name: nameBytes, value: value)
        fields.append(
            Field(
                insertingLiteral: inserting, plainLiteral: plain,
                entrySize: nameBytes.count + value.utf8.count + Self.entryOverhead, sequence: -1,
                nameIndex: nameIndex, name: nameBytes))
        return HPACKCachedField(slot: Int32(fields.count - 1))
    }

    /// Replaces the value of a registered field (e.g. a new JWT); the next use inserts the new value.
    /// The entry with the old value stays in the table until evicted; it is just never referenced again.
    public mutating func update(_ field: HPACKCachedField, value: String) {
        let slot = Int(field.slot)
        precondition(slot >= 0 && slot < fields.count, "unknown HPACKCachedField")
        let (inserting, plain) = Self.encodeLiterals(
            nameIndex: fields[slot].nameIndex, name: fields[slot].name, value: value)
        fields[slot].insertingLiteral.deallocate()
        fields[slot].plainLiteral.deallocate()
        fields[slot].insertingLiteral = inserting
        fields[slot].plainLiteral = plain
        fields[slot].entrySize = fields[slot].name.count + value.utf8.count + Self.entryOverhead
        fields[slot].sequence = -1
    }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE: evicts as needed and makes the next block start with a size update.
    /// (Call when the SETTINGS frame is received; the next header block we send follows it.)
    public mutating func setMaximumSize(_ size: Int) {
        precondition(size >= 0)
        peerMaximum = size
        lowestPeerMaximum = min(lowestPeerMaximum ?? size, size)
        // The decoder will evict down to the lowest value we announce; evict at least as much now.
        limit = min(limit, size)
        evict(toFit: 0)
    }

    /// Emits a pending dynamic-table size update; call first in every header block.
    ///
    /// If the peer lowered its setting below what its decoder applies, the first update is at most the lowest
    /// setting seen (RFC 7541 §4.2: the decoder insists); the last one is the size we use from now on.
    public mutating func beginBlock(_ writer: inout HPACKBlockWriter) {
        guard let lowest = lowestPeerMaximum else { return }
        let target = min(peerMaximum, capacity)
        if lowest < decoderMaximum && lowest < target {
            writer.writeTableSizeUpdate(min(lowest, capacity))
        }
        writer.writeTableSizeUpdate(target)
        decoderMaximum = target
        lowestPeerMaximum = nil
        assert(limit <= target)
        limit = target
    }

    /// Writes the field: indexed (1 byte mostly) if it is still in the table, otherwise literal with incremental
    /// indexing (inserting it, evicting the oldest entries per RFC 7541 4.4), or literal without indexing if it
    /// cannot fit at all (entry size > maximum).
    public mutating func write(_ field: HPACKCachedField, into writer: inout HPACKBlockWriter) {
        let slot = Int(field.slot)
        precondition(slot >= 0 && slot < fields.count, "unknown HPACKCachedField")
        let sequence = fields[slot].sequence
        if sequence >= oldestSequence {
            writer.writeIndexed(HPACKStaticTable.count + nextSequence - sequence)
            return
        }
        let entrySize = fields[slot].entrySize
        guard entrySize <= limit else {
            writer.writeRaw(UnsafeRawBufferPointer(fields[slot].plainLiteral))
            return
        }
        writer.writeRaw(UnsafeRawBufferPointer(fields[slot].insertingLiteral))
        evict(toFit: entrySize)
        entrySizes[nextSequence & ringMask] = Int32(truncatingIfNeeded: entrySize)
        fields[slot].sequence = nextSequence
        nextSequence += 1
        size += entrySize
        assert(entryCount <= ringMask + 1)
    }

    /// Evicts the oldest entries until `extra` more octets fit within `limit` (RFC 7541 §4.4).
    private mutating func evict(toFit extra: Int) {
        while size + extra > limit && oldestSequence < nextSequence {
            size -= Int(entrySizes[oldestSequence & ringMask])
            oldestSequence += 1
        }
        assert(size >= 0 && (oldestSequence < nextSequence || size == 0))
    }

    private static func copy(_ bytes: [UInt8]) -> UnsafeMutableRawBufferPointer {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
        buffer.copyBytes(from: bytes)
        return buffer
    }

    /// Encodes both literal forms of a field once.
    private static func encodeLiterals(
        nameIndex: Int?, name: UnsafeMutableRawBufferPointer, value: String
    ) -> (inserting: UnsafeMutableRawBufferPointer, plain: UnsafeMutableRawBufferPointer) {
        let valueBytes = Array(value.utf8)
        let bound = HPACKBlockWriter.literalBound(nameCount: name.count, valueCount: valueBytes.count)
        let scratch = UnsafeMutableRawPointer.allocate(byteCount: bound, alignment: 1)
        defer { scratch.deallocate() }
        func encode(_ body: (inout HPACKBlockWriter, UnsafeRawBufferPointer) -> Void) -> UnsafeMutableRawBufferPointer {
            var writer = HPACKBlockWriter(destination: scratch, capacity: bound)
            valueBytes.withUnsafeBytes { body(&writer, $0) }
            let literal = UnsafeMutableRawBufferPointer.allocate(byteCount: writer.count, alignment: 1)
            literal.copyMemory(from: writer.writtenBytes)
            return literal
        }
        let name = UnsafeRawBufferPointer(name)
        if let nameIndex {
            return (
                encode { $0.writeLiteralWithIncrementalIndexing(nameIndex: nameIndex, value: $1) },
                encode { $0.writeLiteralWithoutIndexing(nameIndex: nameIndex, value: $1, huffman: true) }
            )
        }
        return (
            encode { $0.writeLiteralWithIncrementalIndexing(name: name, value: $1) },
            encode { $0.writeLiteralWithoutIndexing(name: name, value: $1) }
        )
    }
}

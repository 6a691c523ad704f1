/// Why a header block (or a Huffman string) could not be decoded. Any of these is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 §4.3): the decoder's dynamic table is out of step with the peer's afterwards.
public enum HPACKError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The block ends inside an integer, a string or a representation.
    case truncated
    /// An integer is larger than any index, length or size we accept (2^31 - 1), or has too many continuation bytes.
    case integerOverflow
    /// An index of 0, or past the end of the static and dynamic tables.
    case invalidIndex(Int)
    /// A Huffman string contains EOS, or its padding is longer than 7 bits or not all ones.
    case invalidHuffman
    /// A Huffman string decodes to more octets than the destination holds.
    case destinationTooSmall
    /// A dynamic table size update above the maximum we advertised (SETTINGS_HEADER_TABLE_SIZE).
    case tableSizeUpdateTooLarge(Int)
    /// A dynamic table size update after the first header field of a block.
    case tableSizeUpdateNotAtStart
    /// We lowered SETTINGS_HEADER_TABLE_SIZE and the block does not start with the size update that must follow.
    case tableSizeUpdateMissing
    /// A string longer than the decoder accepts (octets, as sent).
    case stringTooLong(Int)
    /// The decoded fields exceed the maximum header list size (RFC 9113 §6.5.2 accounting).
    case headerListTooLarge

    public var description: String {
        switch self {
        case .truncated: "HPACK: header block truncated"
        case .integerOverflow: "HPACK: integer overflow"
        case .invalidIndex(let index): "HPACK: invalid table index \(index)"
        case .invalidHuffman: "HPACK: invalid Huffman string (EOS, or bad padding)"
        case .destinationTooSmall: "HPACK: Huffman string longer than the destination"
        case .tableSizeUpdateTooLarge(let size): "HPACK: dynamic table size update to \(size) exceeds the maximum"
        case .tableSizeUpdateNotAtStart: "HPACK: dynamic table size update after a header field"
        case .tableSizeUpdateMissing: "HPACK: missing dynamic table size update after the maximum was lowered"
        case .stringTooLong(let count): "HPACK: string of \(count) octets is too long"
        case .headerListTooLarge: "HPACK: header list too large"
        }
    }
}

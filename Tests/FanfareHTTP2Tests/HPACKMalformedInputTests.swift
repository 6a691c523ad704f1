import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK decoder: malformed input", .ownThread)
struct HPACKMalformedInputTests {
    typealias Support = HPACKTestSupport

    @Test(
        "rejects malformed blocks with the right error",
        arguments: [
            // Truncated integers.
            ("ff", HPACKError.truncated), ("ff80", .truncated), ("7f", .truncated), ("3f", .truncated),
            ("0f", .truncated),
            // Truncated strings and representations.
            ("40", .truncated), ("4005 6162", .truncated), ("4001 61", .truncated), ("0401 61 02", .truncated),
            ("0485 f1e3", .truncated), ("44", .truncated), ("1f", .truncated),
            // Index 0 and indices past the table.
            ("80", .invalidIndex(0)), ("be", .invalidIndex(62)), ("7e00", .invalidIndex(62)),
            ("0f2f 00", .invalidIndex(62)), ("ff80 01", .invalidIndex(255)),
            // Table size updates.
            ("82 20", .tableSizeUpdateNotAtStart), ("3fe2 1f", .tableSizeUpdateTooLarge(4097)),
            ("20 82 3f45", .tableSizeUpdateNotAtStart),
            // Integer overflow.
            ("ffff ffff ff7f", .integerOverflow), ("ff80 8080 8080 8000", .integerOverflow),
            ("407f ffff ffff 0f", .integerOverflow),
            // Invalid Huffman strings.
            ("0481 ff", .invalidHuffman), ("4081 18 00", .invalidHuffman), ("0484 ffff ffff", .invalidHuffman),
        ])
    func rejects(hex: String, error: HPACKError) {
        #expect(Support.decodeError(Support.bytes(hex: hex)) == error)
    }

    @Test("refuses strings and header lists over the limits")
    func limits() {
        let value = [UInt8](repeating: UInt8(ascii: "x"), count: 200)
        let block = [0x04, 0x7F, 200 - 127] + value  // :path, 200 octets as-is
        #expect(Support.decodeError(block, maximumHeaderListSize: 100) == .stringTooLong(200))
        #expect(Support.decodeError(block, maximumHeaderListSize: 236) == .headerListTooLarge)  // 5 + 200 + 32 = 237
        #expect(Support.decodeError(block, maximumHeaderListSize: 237) == nil)
        // A Huffman string that decodes to more than the limit.
        let huffman = Support.huffmanEncode([UInt8](repeating: UInt8(ascii: "0"), count: 160))  // 100 octets
        #expect(huffman.count == 100)
        let huffmanBlock = [0x04, 0xE4] + huffman  // 0x80 | 100
        #expect(Support.decodeError(huffmanBlock, maximumHeaderListSize: 150) == .stringTooLong(100))
        #expect(Support.decodeError(huffmanBlock, maximumHeaderListSize: 200) == nil)
        // Strings over 16 KiB are refused whatever the header list size.
        let long = [UInt8](repeating: UInt8(ascii: "y"), count: HPACKDecoder.maximumStringLength + 1)
        let longBlock = Support.writeBlock(capacity: long.count + 16) { writer in
            long.withUnsafeBytes { writer.writeLiteralWithoutIndexing(nameIndex: 4, value: $0, huffman: false) }
        }
        #expect(
            Support.decodeError(longBlock, maximumHeaderListSize: 1 << 20) == .stringTooLong(long.count))
    }

    @Test("after our setting is lowered, the next block must start with a size update no larger")
    func requiredSizeUpdate() throws {
        var decoder = HPACKDecoder()
        decoder.setMaximumTableSize(100)
        #expect(throws: HPACKError.tableSizeUpdateMissing) { try Support.decode(&decoder, [0x82]) }
        var decoderUpdateOnly = HPACKDecoder()
        decoderUpdateOnly.setMaximumTableSize(0)
        #expect(try Support.decode(&decoderUpdateOnly, [0x20]) == [])
        var decoder2 = HPACKDecoder()
        decoder2.setMaximumTableSize(100)
        #expect(throws: HPACKError.tableSizeUpdateTooLarge(101)) {
            try Support.decode(&decoder2, Support.bytes(hex: "3f46 82"))
        }
        var decoder3 = HPACKDecoder()
        decoder3.setMaximumTableSize(0)
        decoder3.setMaximumTableSize(4096)
        #expect(throws: HPACKError.tableSizeUpdateTooLarge(4096)) {
            try Support.decode(&decoder3, Support.bytes(hex: "3fe11f 82"))
        }
        var decoder4 = HPACKDecoder()
        decoder4.setMaximumTableSize(0)
        decoder4.setMaximumTableSize(4096)
        #expect(try Support.decode(&decoder4, Support.bytes(hex: "20 3fe11f 82")) == [Header(":method", "GET")])
        #expect(decoder4.dynamicTableMaximumSize == 4096)
        // An empty block is the first block too, so it lacks the update (as nghttp2 decides; found by
        // Fuzzing/FuzzHPACK, which decodes every block with both).
        var decoder5 = HPACKDecoder()
        decoder5.setMaximumTableSize(100)
        #expect(throws: HPACKError.tableSizeUpdateMissing) { try Support.decode(&decoder5, []) }
    }

    @Test("an error thrown by the field callback stops decoding and propagates")
    func callbackError() {
        var decoder = HPACKDecoder()
        var seen = 0
        #expect(throws: HPACKError.headerListTooLarge) {
            try Support.withBytes(Support.bytes(hex: "8286 84")) { (raw) throws(HPACKError) in
                try decoder.decode(raw) { (_, _) throws(HPACKError) in
                    seen += 1
                    if seen == 2 { throw .headerListTooLarge }
                }
            }
        }
        #expect(seen == 2)
    }

    @Test("errors describe themselves")
    func descriptions() {
        #expect(HPACKError.invalidIndex(70).description.contains("70"))
        #expect(HPACKError.tableSizeUpdateTooLarge(5000).description.contains("5000"))
        #expect(HPACKError.stringTooLong(20000).description.contains("20000"))
        #expect(HPACKError.truncated.description.hasPrefix("HPACK"))
    }
}

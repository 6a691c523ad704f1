import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK Huffman code table", .ownThread)
struct HuffmanCodeTests {
    @Test("has 257 symbols whose codes fit their lengths (5...30 bits)")
    func shape() {
        #expect(HuffmanCode.codes.count == 257)
        #expect(HuffmanCode.bitLengths.count == 257)
        for symbol in 0..<257 {
            let length = Int(HuffmanCode.bitLengths[symbol])
            #expect((5...30).contains(length), "symbol \(symbol)")
            #expect(HuffmanCode.codes[symbol] >> length == 0, "symbol \(symbol)")
        }
    }

    @Test("is a complete prefix code: Kraft sum is exactly 1 and no code is a prefix of another")
    func completePrefixCode() {
        // Sum of 2^(30 - length) over all symbols must be 2^30.
        let kraft = HuffmanCode.bitLengths.reduce(0) { $0 + (1 << (30 - Int($1))) }
        #expect(kraft == 1 << 30)
        // Left-aligned in 30 bits, sorted, each code's interval must end before the next begins.
        let intervals = (0..<257).map { symbol -> (start: Int, end: Int) in
            let length = Int(HuffmanCode.bitLengths[symbol])
            let start = Int(HuffmanCode.codes[symbol]) << (30 - length)
            return (start, start + (1 << (30 - length)))
        }.sorted { $0.start < $1.start }
        #expect(intervals.first?.start == 0)
        #expect(intervals.last?.end == 1 << 30)
        for (previous, next) in zip(intervals, intervals.dropFirst()) {
            #expect(previous.end == next.start)
        }
    }

    @Test(
        "matches RFC 7541 Appendix B entries",
        arguments: [
            (Int(UInt8(ascii: "0")), UInt32(0x0), 5), (Int(UInt8(ascii: "a")), 0x3, 5),
            (Int(UInt8(ascii: " ")), 0x14, 6), (Int(UInt8(ascii: "/")), 0x18, 6), (Int(UInt8(ascii: "A")), 0x21, 6),
            (Int(UInt8(ascii: "z")), 0x7b, 7), (Int(UInt8(ascii: "~")), 0x1ffd, 13), (0, 0x1ff8, 13),
            (10, 0x3ffffffc, 30), (255, 0x3ffffee, 26), (256, 0x3fffffff, 30),
        ])
    func knownEntries(symbol: Int, code: UInt32, length: Int) {
        #expect(HuffmanCode.codes[symbol] == code)
        #expect(Int(HuffmanCode.bitLengths[symbol]) == length)
    }

    @Test("the decoder's state machine has one state per internal node of the code tree")
    func decodingTable() {
        let table = HuffmanDecodingTable.shared
        // From the root, nibble 0 (0000) completes no symbol and stays inside the tree.
        let fromRoot = table.transitions[0]
        #expect(fromRoot & HuffmanDecodingTable.emits == 0)
        #expect(fromRoot & HuffmanDecodingTable.accepts == 0)  // 4 zero bits are not padding
        // 1111 from the root: a valid padding prefix.
        #expect(table.transitions[0xF] & HuffmanDecodingTable.accepts != 0)
        // Every next state is in range.
        for index in 0..<(HuffmanDecodingTable.stateCount * 16) {
            #expect(
                table.transitions[index] & HuffmanDecodingTable.rowOffsetMask
                    < UInt32(HuffmanDecodingTable.stateCount * 64))
        }
    }
}

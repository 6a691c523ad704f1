import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK decoder: RFC 7541 Appendix C", .ownThread)
struct HPACKDecoderTests {
    typealias Support = HPACKTestSupport

    static let date21 = "Mon, 21 Oct 2013 20:13:21 GMT"
    static let date22 = "Mon, 21 Oct 2013 20:13:22 GMT"
    static let location = "https://www.example.com"
    static let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"

    /// Decodes `steps` in sequence with one decoder, checking each block's fields and the table afterwards.
    static func checkSequence(
        maximumTableSize: Int = 4096,
        _ steps: [(block: String, fields: [Header], table: [Header], size: Int)],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        var decoder = HPACKDecoder(maximumTableSize: maximumTableSize)
        for (number, step) in steps.enumerated() {
            let fields = try Support.decode(&decoder, Support.bytes(hex: step.block))
            #expect(fields == step.fields, "block \(number + 1)", sourceLocation: sourceLocation)
            #expect(
                Support.dynamicTable(decoder) == step.table, "table after block \(number + 1)",
                sourceLocation: sourceLocation)
            #expect(
                decoder.dynamicTableSize == step.size, "size after block \(number + 1)", sourceLocation: sourceLocation)
        }
    }

    @Test("C.2.1 literal with indexing")
    func c21() throws {
        try Self.checkSequence([
            (
                "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
                [Header("custom-key", "custom-header")], [Header("custom-key", "custom-header")], 55
            )
        ])
    }

    @Test("C.2.2 literal without indexing")
    func c22() throws {
        try Self.checkSequence([("040c 2f73 616d 706c 652f 7061 7468", [Header(":path", "/sample/path")], [], 0)])
    }

    @Test("C.2.3 literal never indexed")
    func c23() throws {
        try Self.checkSequence([
            ("1008 7061 7373 776f 7264 0673 6563 7265 74", [Header("password", "secret")], [], 0)
        ])
    }

    @Test("C.2.4 indexed")
    func c24() throws {
        try Self.checkSequence([("82", [Header(":method", "GET")], [], 0)])
    }

    static let request1 = [
        Header(":method", "GET"), Header(":scheme", "http"), Header(":path", "/"),
        Header(":authority", "www.example.com"),
    ]
    static let request2 = request1 + [Header("cache-control", "no-cache")]
    static let request3 = [
        Header(":method", "GET"), Header(":scheme", "https"), Header(":path", "/index.html"),
        Header(":authority", "www.example.com"), Header("custom-key", "custom-value"),
    ]
    static let requestTables = [
        [Header(":authority", "www.example.com")],
        [Header("cache-control", "no-cache"), Header(":authority", "www.example.com")],
        [
            Header("custom-key", "custom-value"), Header("cache-control", "no-cache"),
            Header(":authority", "www.example.com"),
        ],
    ]

    @Test("C.3 requests without Huffman, in sequence")
    func c3() throws {
        try Self.checkSequence([
            ("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", Self.request1, Self.requestTables[0], 57),
            ("8286 84be 5808 6e6f 2d63 6163 6865", Self.request2, Self.requestTables[1], 110),
            (
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65", Self.request3,
                Self.requestTables[2], 164
            ),
        ])
    }

    @Test("C.4 requests with Huffman, in sequence")
    func c4() throws {
        try Self.checkSequence([
            ("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", Self.request1, Self.requestTables[0], 57),
            ("8286 84be 5886 a8eb 1064 9cbf", Self.request2, Self.requestTables[1], 110),
            ("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", Self.request3, Self.requestTables[2], 164),
        ])
    }

    static let response1 = [
        Header(":status", "302"), Header("cache-control", "private"), Header("date", date21),
        Header("location", location),
    ]
    static let response2 = [
        Header(":status", "307"), Header("cache-control", "private"), Header("date", date21),
        Header("location", location),
    ]
    static let response3 = [
        Header(":status", "200"), Header("cache-control", "private"), Header("date", date22),
        Header("location", location),
        Header("content-encoding", "gzip"), Header("set-cookie", cookie),
    ]
    static let responseTables = [
        [
            Header("location", location), Header("date", date21), Header("cache-control", "private"),
            Header(":status", "302"),
        ],
        [
            Header(":status", "307"), Header("location", location), Header("date", date21),
            Header("cache-control", "private"),
        ],
        [Header("set-cookie", cookie), Header("content-encoding", "gzip"), Header("date", date22)],
    ]

    @Test("C.5 responses without Huffman, 256-octet table with evictions")
    func c5() throws {
        try Self.checkSequence(
            maximumTableSize: 256,
            [
                (
                    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                    Self.response1, Self.responseTables[0], 222
                ),
                ("4803 3330 37c1 c0bf", Self.response2, Self.responseTables[1], 222),
                (
                    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
                    Self.response3, Self.responseTables[2], 215
                ),
            ])
    }

    @Test("C.6 responses with Huffman, 256-octet table with evictions")
    func c6() throws {
        try Self.checkSequence(
            maximumTableSize: 256,
            [
                (
                    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                    Self.response1, Self.responseTables[0], 222
                ),
                ("4883 640e ffc1 c0bf", Self.response2, Self.responseTables[1], 222),
                (
                    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                    Self.response3, Self.responseTables[2], 215
                ),
            ])
    }

    @Test("size updates at the start of a block evict, and may come in pairs")
    func sizeUpdates() throws {
        var decoder = HPACKDecoder()
        _ = try Support.decode(&decoder, Support.bytes(hex: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"))
        _ = try Support.decode(&decoder, Support.bytes(hex: "8286 84be 5886 a8eb 1064 9cbf"))
        #expect(decoder.dynamicTableCount == 2)
        // 0 then 4096 (3f e1 1f): the table is emptied, then may grow again.
        #expect(try Support.decode(&decoder, Support.bytes(hex: "20 3fe11f 82")) == [Header(":method", "GET")])
        #expect(decoder.dynamicTableCount == 0)
        #expect(decoder.dynamicTableMaximumSize == 4096)
        // Shrink to 60: only the newest entry of 57 fits.
        _ = try Support.decode(
            &decoder, Support.bytes(hex: "3f1d 418c f1e3 c2e5 f23a 6ba0 ab90 f4ff 5886 a8eb 1064 9cbf"))
        #expect(Support.dynamicTable(decoder) == [Header("cache-control", "no-cache")])
        // An entry larger than the table (10 + 30 + 32 = 72 > 60) empties it and is not added.
        let large = Support.writeBlock { writer in
            Array("custom-key".utf8).withUnsafeBytes { name in
                [UInt8](repeating: 0x01, count: 30).withUnsafeBytes {
                    writer.writeLiteralWithIncrementalIndexing(name: name, value: $0)
                }
            }
        }
        #expect(try Support.decode(&decoder, large).count == 1)
        #expect(decoder.dynamicTableCount == 0 && decoder.dynamicTableSize == 0)
        // An empty block is valid.
        #expect(try Support.decode(&decoder, []) == [])
    }

    @Test("a literal may name the entry its insertion evicts (RFC 7541 §4.4)")
    func nameOfEvictedEntry() throws {
        // Table of 100: ":authority www.example.com" (57); then a literal with incremental indexing whose name is
        // index 62 (that entry) and whose 20-octet value forces its eviction.
        var decoder = HPACKDecoder(maximumTableSize: 100)
        _ = try Support.decode(&decoder, Support.bytes(hex: "3f45 418c f1e3 c2e5 f23a 6ba0 ab90 f4ff"))
        #expect(decoder.dynamicTableSize == 57)
        let value = String(repeating: "x", count: 20)
        let block = Support.bytes(hex: "7e14") + Array(value.utf8)
        #expect(try Support.decode(&decoder, block) == [Header(":authority", value)])
        #expect(Support.dynamicTable(decoder) == [Header(":authority", value)])
    }

    @Test("the arena moves live entries to the front when it reaches its end")
    func arenaCompaction() throws {
        // Many insertions through a small table; each block checks the whole table against the expected FIFO.
        var decoder = HPACKDecoder(maximumTableSize: 200)
        var expected: [Header] = []
        var generator = SeededGenerator(seed: 200)
        for round in 0..<500 {
            let value = String(
                repeating: Character(Unicode.Scalar(UInt8(97 + round % 26))),
                count: Int.random(in: 0...120, using: &generator))
            let name = "n\(round % 7)"
            let block = Support.writeBlock { writer in
                Array(name.utf8).withUnsafeBytes { name in
                    Array(value.utf8).withUnsafeBytes {
                        writer.writeLiteralWithIncrementalIndexing(name: name, value: $0)
                    }
                }
                if round > 0 { writer.writeIndexed(62) }
            }
            let fields = try Support.decode(&decoder, block)
            expected.insert(Header(name, value), at: 0)
            while expected.reduce(0, { $0 + $1.name.count + $1.value.count + 32 }) > 200 { expected.removeLast() }
            #expect(fields.first == Header(name, value))
            #expect(Support.dynamicTable(decoder) == expected, "round \(round)")
        }
    }
}

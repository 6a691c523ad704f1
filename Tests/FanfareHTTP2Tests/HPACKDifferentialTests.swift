import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

/// Our HPACK against nghttp2 1.52's, on long seeded random sequences (a failure reproduces from its seed).
@Suite("HPACK against nghttp2", .ownThread)
struct HPACKDifferentialTests {
    typealias Support = HPACKTestSupport

    static let base64URL = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func randomText(_ count: Int, from alphabet: [UInt8], using generator: inout SeededGenerator) -> String {
        String(decoding: (0..<count).map { _ in alphabet.randomElement(using: &generator)! }, as: UTF8.self)
    }

    static func randomJWT(using generator: inout SeededGenerator) -> String {
        "bearer " + randomText(36, from: base64URL, using: &generator) + "."
            + randomText(Int.random(in: 40...80, using: &generator), from: base64URL, using: &generator) + "."
            + randomText(86, from: base64URL, using: &generator)
    }

    /// (a) Client-style blocks from HPACKBlockWriter + HPACKEncoderTable decode in nghttp2's inflater (and in
    /// ours) to exactly the intended fields, across JWT changes, priority flips and table size changes.
    @Test(
        "client blocks decode in nghttp2 to the intended fields",
        arguments: [
            (UInt64(1), 4096, [4096]), (2, 4096, [0, 64, 100, 256, 1000, 4096]), (3, 256, [0, 100, 256, 4096]),
            (4, 300, [300, 4096]), (5, 0, [0, 4096]), (6, 8192, [4096, 8192, 200, 0]), (7, 1000, [1000, 500, 350]),
        ])
    func clientBlocks(seed: UInt64, capacity: Int, sizes: [Int]) throws {
        var generator = SeededGenerator(seed: seed)
        let inflater = NGHTTP2Inflater()
        var decoder = HPACKDecoder(maximumTableSize: max(sizes.max()!, 4096))
        var table = HPACKEncoderTable(maximumSize: capacity)

        let authorityValue = "api.sandbox.push.apple.com"
        let topicValue = "com.example.app.push-type.liveactivity"
        var jwt = Self.randomJWT(using: &generator)
        let authority = table.register(nameIndex: HPACKStaticTable.authority, name: ":authority", value: authorityValue)
        let authorization = table.register(nameIndex: HPACKStaticTable.authorization, name: "authorization", value: jwt)
        let topic = table.register(nameIndex: nil, name: "apns-topic", value: topicValue)
        let pushType = table.register(nameIndex: nil, name: "apns-push-type", value: "liveactivity")
        let priority10 = table.register(nameIndex: nil, name: "apns-priority", value: "10")
        let priority5 = table.register(nameIndex: nil, name: "apns-priority", value: "5")

        let capacityBytes = 2048
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacityBytes, alignment: 16)
        defer { buffer.deallocate() }
        for blockNumber in 0..<400 {
            // Between blocks: a new JWT now and then, and SETTINGS_HEADER_TABLE_SIZE changes (sometimes two).
            if Int.random(in: 0..<20, using: &generator) == 0 {
                jwt = Self.randomJWT(using: &generator)
                table.update(authorization, value: jwt)
            }
            if sizes.count > 1 && Int.random(in: 0..<15, using: &generator) == 0 {
                for _ in 0..<Int.random(in: 1...2, using: &generator) {
                    let size = sizes.randomElement(using: &generator)!
                    table.setMaximumSize(size)
                    inflater.changeTableSize(size)
                    decoder.setMaximumTableSize(size)
                }
            }

            let token = Support.randomBytes(Int.random(in: 0..<4, using: &generator) == 0 ? 100 : 32, using: &generator)
            let apnsID = Support.hex(Support.randomBytes(16, using: &generator))
            let urgent = Bool.random(using: &generator)
            let contentLength = String(Int.random(in: 0...5000, using: &generator))
            var expected: [Header] = [Header(":method", "POST"), Header(":scheme", "https")]

            var writer = HPACKBlockWriter(destination: buffer, capacity: capacityBytes)
            table.beginBlock(&writer)
            writer.writeIndexed(HPACKStaticTable.methodPOST)
            writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
            Array("/3/device/".utf8).withUnsafeBytes { prefix in
                token.withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.path, valuePrefix: prefix, hexOf: $0)
                }
            }
            expected.append(Header(":path", "/3/device/" + Support.hex(token)))
            table.write(authority, into: &writer)
            expected.append(Header(":authority", authorityValue))
            table.write(authorization, into: &writer)
            expected.append(Header("authorization", jwt))
            table.write(topic, into: &writer)
            expected.append(Header("apns-topic", topicValue))
            table.write(pushType, into: &writer)
            expected.append(Header("apns-push-type", "liveactivity"))
            table.write(urgent ? priority10 : priority5, into: &writer)
            expected.append(Header("apns-priority", urgent ? "10" : "5"))
            Array("apns-id".utf8).withUnsafeBytes { name in
                Array(apnsID.utf8).withUnsafeBytes { writer.writeLiteralWithoutIndexing(name: name, value: $0) }
            }
            expected.append(Header("apns-id", apnsID))
            Array(contentLength.utf8).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(
                    nameIndex: HPACKStaticTable.contentLength, value: $0, huffman: Bool.random(using: &generator))
            }
            expected.append(Header("content-length", contentLength))
            // Our table's own entries stay within its limit.
            #expect(table.size <= table.limit)

            let block = Array(writer.writtenBytes)
            let inflated = inflater.inflate(block)
            #expect(inflated == .success(expected), "seed \(seed) block \(blockNumber): \(Support.hex(block))")
            guard inflated == .success(expected) else { return }
            let decoded = try Support.decode(&decoder, block)
            #expect(decoded == expected, "seed \(seed) block \(blockNumber)")
        }
    }

    /// (b) Random header lists encoded by nghttp2's deflater decode identically in HPACKDecoder (and in
    /// nghttp2's inflater), including never-indexed fields, evictions and table size changes.
    @Test(
        "nghttp2's blocks of random header lists decode identically in HPACKDecoder",
        arguments: [
            (UInt64(11), 4096, 4096, [4096]), (12, 4096, 512, [512, 0, 256, 512]), (13, 256, 4096, [4096, 100, 300]),
            (14, 8192, 8192, [8192, 1024, 0, 4096]), (15, 64, 4096, [4096, 64, 0]), (16, 0, 4096, [4096]),
        ])
    func randomHeaderLists(seed: UInt64, deflaterMaximum: Int, advertised: Int, sizes: [Int]) throws {
        var generator = SeededGenerator(seed: seed)
        let deflater = NGHTTP2Deflater(maximumTableSize: deflaterMaximum)
        let inflater = NGHTTP2Inflater()
        var decoder = HPACKDecoder(maximumTableSize: max(advertised, sizes.max()!), maximumHeaderListSize: 1 << 20)
        // Our SETTINGS (as the peer's encoder sees them once acknowledged).
        deflater.changeTableSize(advertised)
        inflater.changeTableSize(advertised)
        decoder.setMaximumTableSize(advertised)

        let staticNames = (1...HPACKStaticTable.count).map { HPACKStaticTable.entry($0).nameString }
        let nameAlphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var seen: [Header] = []
        for blockNumber in 0..<300 {
            if sizes.count > 1 && Int.random(in: 0..<12, using: &generator) == 0 {
                for _ in 0..<Int.random(in: 1...2, using: &generator) {
                    let size = sizes.randomElement(using: &generator)!
                    deflater.changeTableSize(size)
                    inflater.changeTableSize(size)
                    decoder.setMaximumTableSize(size)
                }
            }
            var fields: [Header] = []
            var neverIndexed: [Bool] = []
            for _ in 0..<Int.random(in: 0...20, using: &generator) {
                let field: Header
                switch Int.random(in: 0..<10, using: &generator) {
                case 0..<4 where !seen.isEmpty:
                    field = seen.randomElement(using: &generator)!  // repeated: indexed
                case 0..<6:
                    let name = staticNames.randomElement(using: &generator)!
                    let value = Support.randomBytes(Int.random(in: 0...40, using: &generator), using: &generator)
                    field = Header(name: Array(name.utf8), value: value)
                default:
                    let name = Self.randomText(
                        Int.random(in: 1...30, using: &generator), from: nameAlphabet, using: &generator)
                    let long = Int.random(in: 0..<8, using: &generator) == 0
                    let value = Support.randomBytes(
                        Int.random(in: 0...(long ? 1500 : 120), using: &generator), using: &generator)
                    field = Header(name: Array(name.utf8), value: value)
                }
                fields.append(field)
                neverIndexed.append(Int.random(in: 0..<10, using: &generator) == 0)
                if seen.count < 200 {
                    seen.append(field)
                } else {
                    seen[Int.random(in: 0..<200, using: &generator)] = field
                }
            }
            let block = deflater.deflate(fields, neverIndexed: neverIndexed)
            #expect(inflater.inflate(block) == .success(fields), "nghttp2 itself, seed \(seed) block \(blockNumber)")
            let decoded = try Support.decode(&decoder, block)
            #expect(decoded == fields, "seed \(seed) block \(blockNumber): \(Support.hex(block))")
            guard decoded == fields else { return }
        }
    }

    /// Random client-style fields through our encoder table with random registrations, so many different
    /// entries churn through small tables.
    @Test(
        "many registered fields churning through small tables stay in step with nghttp2",
        arguments: [UInt64(21), 22, 23])
    func churn(seed: UInt64) throws {
        var generator = SeededGenerator(seed: seed)
        let inflater = NGHTTP2Inflater()
        var decoder = HPACKDecoder()
        var table = HPACKEncoderTable(maximumSize: [128, 256, 512, 1024].randomElement(using: &generator)!)
        var values: [String] = []
        var handles: [HPACKCachedField] = []
        var names: [String] = []
        for index in 0..<40 {
            let name = "x-churn-\(index)"
            let value = Self.randomText(
                Int.random(in: 0...200, using: &generator), from: Self.base64URL, using: &generator)
            handles.append(table.register(nameIndex: nil, name: name, value: value))
            names.append(name)
            values.append(value)
        }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        for blockNumber in 0..<300 {
            var writer = HPACKBlockWriter(destination: buffer, capacity: 64 * 1024)
            table.beginBlock(&writer)
            var expected: [Header] = []
            for _ in 0..<Int.random(in: 0...12, using: &generator) {
                let which = Int.random(in: 0..<handles.count, using: &generator)
                if Int.random(in: 0..<10, using: &generator) == 0 {
                    values[which] = Self.randomText(
                        Int.random(in: 0...200, using: &generator), from: Self.base64URL, using: &generator)
                    table.update(handles[which], value: values[which])
                }
                table.write(handles[which], into: &writer)
                expected.append(Header(names[which], values[which]))
            }
            let block = Array(writer.writtenBytes)
            #expect(inflater.inflate(block) == .success(expected), "seed \(seed) block \(blockNumber)")
            #expect(try Support.decode(&decoder, block) == expected, "seed \(seed) block \(blockNumber)")
        }
    }
}

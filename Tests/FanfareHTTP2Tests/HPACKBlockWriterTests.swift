import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK block writer", .ownThread)
struct HPACKBlockWriterTests {
    typealias Support = HPACKTestSupport

    @Test("writes the single representations of RFC 7541 Appendix C.2 (strings as-is)")
    func appendixC2() {
        // C.2.1 literal with indexing, new name: without Huffman the example's bytes exactly.
        let c21 = Support.writeBlock { writer in
            [UInt8(0x40)].withUnsafeBytes { writer.writeRaw($0) }
            Array("custom-key".utf8).withUnsafeBytes { writer.writeString($0, huffman: false) }
            Array("custom-header".utf8).withUnsafeBytes { writer.writeString($0, huffman: false) }
        }
        #expect(Support.hex(c21) == "400a637573746f6d2d6b65790d637573746f6d2d686561646572")
        // C.2.2 literal without indexing, indexed name.
        let c22 = Support.writeBlock { writer in
            Array("/sample/path".utf8).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.path, value: $0, huffman: false)
            }
        }
        #expect(Support.hex(c22) == "040c2f73616d706c652f70617468")
        // C.2.4 indexed.
        #expect(Support.hex(Support.writeBlock { $0.writeIndexed(HPACKStaticTable.methodGET) }) == "82")
    }

    @Test("Huffman-codes strings only when strictly shorter")
    func huffmanOnlyWhenShorter() {
        // "no-cache": 8 octets as-is, 6 with Huffman.
        let shorter = Support.writeBlock { writer in
            Array("no-cache".utf8).withUnsafeBytes {
                writer.writeLiteralWithIncrementalIndexing(nameIndex: 24, value: $0)
            }
        }
        #expect(Support.hex(shorter) == "5886a8eb10649cbf")
        // Control octets have long codes: sent as-is.
        let longer = Support.writeBlock { writer in
            [UInt8](repeating: 0x01, count: 4).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(nameIndex: 28, value: $0, huffman: true)
            }
        }
        #expect(Support.hex(longer) == "0f0d0401010101")
        // Empty value: as-is, length 0.
        let empty = Support.writeBlock { writer in
            [UInt8]().withUnsafeBytes { writer.writeLiteralWithIncrementalIndexing(nameIndex: 1, value: $0) }
        }
        #expect(Support.hex(empty) == "4100")
    }

    @Test("writes :path from a prefix and the hex of a token without building the text")
    func hexPath() throws {
        var generator = SeededGenerator(seed: 3)
        for length in [0, 1, 2, 8, 32, 64, 100] {
            let token = Support.randomBytes(length, using: &generator)
            let path = "/3/device/" + Support.hex(token)
            let written = Support.writeBlock { writer in
                Array("/3/device/".utf8).withUnsafeBytes { prefix in
                    token.withUnsafeBytes {
                        writer.writeLiteralWithoutIndexing(
                            nameIndex: HPACKStaticTable.path, valuePrefix: prefix, hexOf: $0)
                    }
                }
            }
            let expected = Support.writeBlock { writer in
                Array(path.utf8).withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.path, value: $0, huffman: true)
                }
            }
            #expect(written == expected, "length \(length)")
            var decoder = HPACKDecoder()
            #expect(try Support.decode(&decoder, written) == [Header(":path", path)])
        }
        // Tiny values where Huffman is not shorter go as-is ("/" + "" is 1 octet either way).
        let tiny = Support.writeBlock { writer in
            Array("/".utf8).withUnsafeBytes { prefix in
                [UInt8]().withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: 4, valuePrefix: prefix, hexOf: $0)
                }
            }
        }
        #expect(Support.hex(tiny) == "04012f")
        let twoDigits = Support.writeBlock { writer in
            [UInt8]().withUnsafeBytes { prefix in
                [UInt8(0xAB)].withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: 4, valuePrefix: prefix, hexOf: $0)
                }
            }
        }
        // "ab": 'a' 5 bits + 'b' 6 bits = 2 octets with Huffman, 2 as-is: as-is.
        #expect(Support.hex(twoDigits) == "04026162")
    }

    @Test("writes every representation so that nghttp2 decodes it")
    func representationsDecodeInNghttp2() {
        let jwt = "bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyMyJ9.eyJpc3MiOiJERUYxMjMiLCJpYXQiOjE3MDAwMDAwMDB9.sig"
        let block = Support.writeBlock { writer in
            writer.writeTableSizeUpdate(4096)
            writer.writeIndexed(HPACKStaticTable.methodPOST)
            writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
            Array(jwt.utf8).withUnsafeBytes {
                writer.writeLiteralWithIncrementalIndexing(nameIndex: HPACKStaticTable.authorization, value: $0)
            }
            Array("apns-topic".utf8).withUnsafeBytes { name in
                Array("com.example.app".utf8).withUnsafeBytes {
                    writer.writeLiteralWithIncrementalIndexing(name: name, value: $0)
                }
            }
            writer.writeIndexed(63)  // authorization, now one entry older
            Array("apns-id".utf8).withUnsafeBytes { name in
                Array("123e4567-e89b-12d3-a456-426614174000".utf8).withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(name: name, value: $0)
                }
            }
            Array("1234".utf8).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.contentLength, value: $0, huffman: false)
            }
        }
        let fields = NGHTTP2Inflater().inflate(block)
        #expect(
            fields
                == .success([
                    Header(":method", "POST"), Header(":scheme", "https"), Header("authorization", jwt),
                    Header("apns-topic", "com.example.app"), Header("authorization", jwt),
                    Header("apns-id", "123e4567-e89b-12d3-a456-426614174000"), Header("content-length", "1234"),
                ]))
    }

    @Test("literalBound covers the worst case and writes stay within it")
    func literalBound() {
        var generator = SeededGenerator(seed: 9)
        for _ in 0..<200 {
            let name = (0..<Int.random(in: 1...300, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator) & 0x5F | 0x20  // no uppercase letters
            }.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            let value = Support.randomBytes(Int.random(in: 0...300, using: &generator), using: &generator)
            let bound = HPACKBlockWriter.literalBound(nameCount: name.count, valueCount: value.count)
            let written = Support.writeBlock(capacity: bound) { writer in
                name.withUnsafeBytes { name in
                    value.withUnsafeBytes { writer.writeLiteralWithIncrementalIndexing(name: name, value: $0) }
                }
            }
            #expect(written.count <= bound)
            let indexedBound = HPACKBlockWriter.literalBound(nameCount: 0, valueCount: value.count)
            let indexed = Support.writeBlock(capacity: indexedBound) { writer in
                value.withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: 100_000, value: $0, huffman: true)
                }
            }
            #expect(indexed.count <= indexedBound)
        }
    }

    @Test("Huffman strings match the exact encoder and nothing past the block's end (+ 8 bytes of scratch) is touched")
    func noWritesPastTheEnd() {
        var generator = SeededGenerator(seed: 77)
        let alphabets: [[UInt8]] = [
            Array("0123456789abcdef".utf8),
            Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8),
            (0...255).map { UInt8($0) },
        ]
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 1024, alignment: 16)
        defer { buffer.deallocate() }
        for round in 0..<600 {
            let alphabet = alphabets[round % alphabets.count]
            let value = (0..<Int.random(in: 0...300, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }
            let token = Support.randomBytes(Int.random(in: 0...100, using: &generator), using: &generator)
            buffer.initializeMemory(as: UInt8.self, repeating: 0xAA, count: 1024)
            var writer = HPACKBlockWriter(destination: buffer, capacity: 1024)
            value.withUnsafeBytes { writer.writeLiteralWithIncrementalIndexing(nameIndex: 1, value: $0) }
            let afterValue = writer.count
            value.withUnsafeBytes { prefix in
                token.withUnsafeBytes {
                    writer.writeLiteralWithoutIndexing(nameIndex: 4, valuePrefix: prefix, hexOf: $0)
                }
            }
            let written = Array(writer.writtenBytes)
            // The hex fast path may leave up to 8 bytes of scratch right after the block, never more.
            let scratchEnd = min(1024, writer.count + 8)
            #expect(
                UnsafeRawBufferPointer(start: buffer + scratchEnd, count: 1024 - scratchEnd).allSatisfy { $0 == 0xAA })
            // The same strings through the exact (public) encoder.
            let huffmanValue = Support.huffmanEncode(value)
            if huffmanValue.count < value.count {
                #expect(
                    Array(written[(afterValue - huffmanValue.count)..<afterValue]) == huffmanValue, "round \(round)")
            }
            let path = value + Array(Support.hex(token).utf8)
            let huffmanPath = Support.huffmanEncode(path)
            if huffmanPath.count < path.count {
                #expect(Array(written[(written.count - huffmanPath.count)...]) == huffmanPath, "round \(round)")
            }
        }
    }
}

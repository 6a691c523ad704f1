import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK encoder table", .ownThread)
struct HPACKEncoderTableTests {
    typealias Support = HPACKTestSupport

    /// One block: `beginBlock`, then `body`.
    static func block(
        _ table: inout HPACKEncoderTable, _ body: (inout HPACKBlockWriter, inout HPACKEncoderTable) -> Void
    ) -> String {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 16)
        defer { buffer.deallocate() }
        var writer = HPACKBlockWriter(destination: buffer, capacity: 4096)
        table.beginBlock(&writer)
        body(&writer, &table)
        return Support.hex(Array(writer.writtenBytes))
    }

    @Test("reproduces the RFC 7541 C.4 request blocks byte for byte")
    func appendixC4() {
        var table = HPACKEncoderTable()
        let authority = table.register(
            nameIndex: HPACKStaticTable.authority, name: ":authority", value: "www.example.com")
        let cacheControl = table.register(nameIndex: nil, name: "cache-control", value: "no-cache")
        let custom = table.register(nameIndex: nil, name: "custom-key", value: "custom-value")
        let first = Self.block(&table) { writer, table in
            writer.writeIndexed(2)
            writer.writeIndexed(6)
            writer.writeIndexed(4)
            table.write(authority, into: &writer)
        }
        #expect(first == Support.hex(Support.bytes(hex: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff")))
        let second = Self.block(&table) { writer, table in
            writer.writeIndexed(2)
            writer.writeIndexed(6)
            writer.writeIndexed(4)
            table.write(authority, into: &writer)
            table.write(cacheControl, into: &writer)
        }
        #expect(second == Support.hex(Support.bytes(hex: "8286 84be 5886 a8eb 1064 9cbf")))
        let third = Self.block(&table) { writer, table in
            writer.writeIndexed(2)
            writer.writeIndexed(7)
            writer.writeIndexed(5)
            table.write(authority, into: &writer)
            table.write(custom, into: &writer)
        }
        #expect(third == Support.hex(Support.bytes(hex: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf")))
        #expect(table.size == 164 && table.entryCount == 3)
    }

    /// The one difference from the RFC: "307" takes 3 octets either way, and we send equal lengths as-is
    /// (cheaper to decode), where the example Huffman-codes it (48 83 640eff); the table evolves the same.
    @Test("reproduces the RFC 7541 C.6 response blocks with a 256-octet table, evictions and a changed value")
    func appendixC6() {
        var table = HPACKEncoderTable(maximumSize: 256)
        let status302 = table.register(nameIndex: HPACKStaticTable.status200, name: ":status", value: "302")
        let status307 = table.register(nameIndex: HPACKStaticTable.status200, name: ":status", value: "307")
        let cacheControl = table.register(nameIndex: nil, name: "cache-control", value: "private")
        let date = table.register(nameIndex: HPACKStaticTable.date, name: "date", value: HPACKDecoderTests.date21)
        let location = table.register(nameIndex: nil, name: "location", value: HPACKDecoderTests.location)
        let contentEncoding = table.register(nameIndex: nil, name: "content-encoding", value: "gzip")
        let setCookie = table.register(nameIndex: nil, name: "set-cookie", value: HPACKDecoderTests.cookie)
        let first = Self.block(&table) { writer, table in
            for field in [status302, cacheControl, date, location] { table.write(field, into: &writer) }
        }
        #expect(
            first
                == Support.hex(
                    Support.bytes(
                        hex:
                            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"
                    )))
        #expect(table.size == 222)
        let second = Self.block(&table) { writer, table in
            for field in [status307, cacheControl, date, location] { table.write(field, into: &writer) }
        }
        #expect(second == "4803333037" + "c1c0bf")
        #expect(table.size == 222)
        table.update(date, value: HPACKDecoderTests.date22)
        let third = Self.block(&table) { writer, table in
            writer.writeIndexed(HPACKStaticTable.status200)
            for field in [cacheControl, date, location, contentEncoding, setCookie] {
                table.write(field, into: &writer)
            }
        }
        #expect(
            third
                == Support.hex(
                    Support.bytes(
                        hex:
                            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07"
                    )))
        #expect(table.size == 215 && table.entryCount == 3)
    }

    @Test("a lowered maximum evicts at once and the next block starts with one size update")
    func lowered() {
        var table = HPACKEncoderTable()
        let authority = table.register(nameIndex: 1, name: ":authority", value: "www.example.com")
        _ = Self.block(&table) { writer, table in table.write(authority, into: &writer) }
        #expect(table.entryCount == 1)
        table.setMaximumSize(50)  // the entry (57) no longer fits
        #expect(table.entryCount == 0 && table.size == 0)
        // 50 = 31 + 19: 3f 13. The field can never fit now: literal without indexing (01 + value).
        let next = Self.block(&table) { writer, table in table.write(authority, into: &writer) }
        #expect(next == "3f13" + "018cf1e3c2e5f23a6ba0ab90f4ff")
        let after = Self.block(&table) { writer, table in table.write(authority, into: &writer) }
        #expect(after == "018cf1e3c2e5f23a6ba0ab90f4ff")
    }

    @Test("lowered then raised between blocks: the minimum first, then the final size")
    func loweredThenRaised() {
        var table = HPACKEncoderTable()
        table.setMaximumSize(0)
        table.setMaximumSize(4096)
        #expect(Self.block(&table) { _, _ in } == "20" + "3fe11f")
        #expect(Self.block(&table) { _, _ in } == "")
        table.setMaximumSize(100)
        table.setMaximumSize(2000)
        table.setMaximumSize(300)
        // 100 = 3f 45; 300 = 31 + 269 = 3f 8d 02.
        #expect(Self.block(&table) { _, _ in } == "3f45" + "3f8d02")
    }

    @Test("raising goes no higher than the table's own maximum, and needs no minimum first")
    func raised() {
        var table = HPACKEncoderTable(maximumSize: 8192)
        #expect(table.limit == 4096)
        table.setMaximumSize(65536)
        #expect(Self.block(&table) { _, _ in } == "3fe13f")  // 8192
        #expect(table.limit == 8192)
        var small = HPACKEncoderTable(maximumSize: 256)
        small.setMaximumSize(4096)
        #expect(Self.block(&small) { _, _ in } == "3fe101")  // 256 = 31 + 225
    }

    @Test("indices count the entries inserted after a field, within one block too")
    func indicesWithinBlock() {
        var table = HPACKEncoderTable()
        let fields = (0..<5).map { table.register(nameIndex: nil, name: "x-field-\($0)", value: "value \($0)") }
        _ = Self.block(&table) { writer, table in fields.forEach { table.write($0, into: &writer) } }
        // Newest (x-field-4) is 62, oldest (x-field-0) is 66.
        let indexed = Self.block(&table) { writer, table in fields.forEach { table.write($0, into: &writer) } }
        #expect(indexed == "c2c1c0bfbe")
        // A changed value inserts again, shifting every other entry by one within the same block.
        table.update(fields[2], value: "new")
        let shifted = Self.block(&table) { writer, table in fields.forEach { table.write($0, into: &writer) } }
        #expect(shifted.hasPrefix("c2c1"))  // before the insertion
        #expect(shifted.hasSuffix("c0bf"))  // x-field-3 and x-field-4 after it: 64 and 63
        #expect(table.entryCount == 6)
    }
}

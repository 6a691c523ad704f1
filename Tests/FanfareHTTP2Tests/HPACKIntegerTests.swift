import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK integers (RFC 7541 §5.1)", .ownThread)
struct HPACKIntegerTests {
    typealias Support = HPACKTestSupport

    @Test(
        "writes and reads the Appendix C.1 examples and the prefix boundaries",
        arguments: [
            (10, 5, "0a"),  // C.1.1
            (1337, 5, "1f9a0a"),  // C.1.2
            (42, 8, "2a"),  // C.1.3
            (30, 5, "1e"), (31, 5, "1f00"), (158, 5, "1f7f"), (159, 5, "1f8001"), (126, 7, "7e"), (127, 7, "7f00"),
            (254, 8, "fe"), (255, 8, "ff00"), (0, 1, "00"), (1, 1, "0100"), (4096, 5, "1fe11f"),
            (Int(Int32.max), 4, "0ff0ffffff07"), (Int(Int32.max), 5, "1fe0ffffff07"),
        ])
    func roundTrip(value: Int, prefixBits: Int, hex: String) throws {
        let written = Support.writeBlock { $0.writeInteger(value, prefixBits: prefixBits, firstByteFlags: 0) }
        #expect(Support.hex(written) == hex)
        #expect(HPACKBlockWriter.integerLength(value, prefixBits: prefixBits) == written.count)
        let read = try Support.withBytes(written) { (raw) throws(HPACKError) -> (Int, Bool) in
            var reader = HPACKBlockReader(raw)
            return (try reader.readInteger(prefixBits: prefixBits), reader.isAtEnd)
        }
        #expect(read.0 == value)
        #expect(read.1)
    }

    @Test("keeps the flag bits above the prefix and ignores them when reading")
    func flags() throws {
        let written = Support.writeBlock { $0.writeInteger(1337, prefixBits: 5, firstByteFlags: 0xE0) }
        #expect(Support.hex(written) == "ff9a0a")
        let value = try Support.withBytes(written) { (raw) throws(HPACKError) in
            var reader = HPACKBlockReader(raw)
            return try reader.readInteger(prefixBits: 5)
        }
        #expect(value == 1337)
    }

    @Test(
        "rejects truncated and overlong integers",
        arguments: [
            ("", HPACKError.truncated), ("1f", .truncated), ("1f80", .truncated), ("1fff ffff", .truncated),
            ("1f ffff ffff 7f", .integerOverflow),  // 2^35-ish
            ("1f e1ff ffff 07", .integerOverflow),  // Int32.max + 1
            ("1f 8080 8080 8000", .integerOverflow),  // six continuation octets, even if the value is small
        ])
    func rejects(hex: String, error: HPACKError) {
        #expect(throws: error) {
            try Support.withBytes(Support.bytes(hex: hex)) { (raw) throws(HPACKError) in
                var reader = HPACKBlockReader(raw)
                _ = try reader.readInteger(prefixBits: 5)
            }
        }
    }
}

import FanfareCore
import FanfareTestSupport
import Testing

@Suite("Network text made printable", .ownThread)
struct PrintableTextTests {
    private func escaped(_ bytes: [UInt8], limit: Int = 512) -> String {
        bytes.withUnsafeBytes { PrintableText.escaping($0, limit: limit) }
    }

    @Test("printable ASCII passes; controls, DEL, backslash and non-ASCII are escaped")
    func escaping() {
        #expect(escaped(Array(#"{"reason":"Shutdown"}"#.utf8)) == #"{"reason":"Shutdown"}"#)
        // A terminal escape (clear screen, move cursor), a bell, a CR that would overwrite the line.
        #expect(escaped([0x1b, 0x5b, 0x32, 0x4a, 0x07, 0x0d, 0x0a, 0x09]) == #"\x1b[2J\x07\r\n\t"#)
        #expect(escaped([0x5c, 0x7f, 0x00, 0xff]) == #"\\\x7f\x00\xff"#)
        // UTF-8 (here C1 control U+009B, a one-character CSI, and a bidi override U+202E) is escaped byte by byte.
        #expect(escaped([0xc2, 0x9b, 0xe2, 0x80, 0xae]) == #"\xc2\x9b\xe2\x80\xae"#)
        #expect(PrintableText.escaping("bell\u{7}") == #"bell\x07"#)
    }

    @Test("every byte value comes out as printable ASCII, and long input is cut with a count")
    func allBytesAndLimit() {
        let text = escaped((0...255).map { UInt8($0) }, limit: 1000)
        #expect(text.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7e })
        #expect(
            escaped(Array(repeating: 0x41, count: 300), limit: 256) == String(repeating: "A", count: 256)
                + "…(44 more bytes)")
        #expect(PrintableText.isPrintable("BadDeviceToken"))
        #expect(!PrintableText.isPrintable("a\\b"))
        #expect(!PrintableText.isPrintable("\u{1b}[0m"))
    }
}

import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("JSONWriter", .ownThread)
struct JSONWriterTests {
    /// Writes `value` as a top-level JSON string.
    static func quoted(_ value: String) -> String {
        TestSupport.write { $0.string(value) }.text
    }

    @Test("inserts commas and colons automatically")
    func structure() {
        let (text, writer) = TestSupport.write { w in
            w.beginObject()
            w.key("a")
            w.int(1)
            w.key("b")
            w.beginArray()
            w.bool(true)
            w.bool(false)
            w.null()
            w.beginArray()
            w.endArray()
            w.beginObject()
            w.endObject()
            w.endArray()
            w.key("c" as String)
            w.beginObject()
            w.key("d")
            w.string("e")
            w.endObject()
            w.endObject()
        }
        #expect(text == #"{"a":1,"b":[true,false,null,[],{}],"c":{"d":"e"}}"#)
        #expect(writer.isComplete)
        #expect(!writer.overflowed)
        #expect(writer.count == text.utf8.count)
        #expect(TestSupport.validate(text) == nil)
    }

    @Test(
        "formats integers by hand",
        arguments: [
            (Int64(0), "0"), (1, "1"), (-1, "-1"), (10, "10"), (1_735_689_600, "1735689600"),
            (Int64.max, "9223372036854775807"), (Int64.min, "-9223372036854775808"),
        ])
    func integers(value: Int64, expected: String) {
        #expect(TestSupport.write { $0.int(value) }.text == expected)
    }

    @Test(
        "formats finite doubles as valid JSON numbers",
        arguments: [
            (5.0, "5.0"), (0.1, "0.1"), (1e-05, "1e-05"), (-0.0, "-0.0"), (1e20, "1e+20"), (100.0, "100.0"),
            (-2.5, "-2.5"), (1.7976931348623157e308, "1.7976931348623157e+308"),
            (Double.leastNonzeroMagnitude, "5e-324"),
        ])
    func doubles(value: Double, expected: String) throws {
        let text = TestSupport.write { $0.double(value) }.text
        #expect(text == expected)
        #expect(TestSupport.validate(text) == nil)
        #expect(Double(text) == value)
    }

    @Test(
        "escapes quotes, backslashes, controls and U+2028/U+2029 exactly",
        arguments: [
            ("plain", #""plain""#),
            ("say \"hi\"", #""say \"hi\"""#),
            (#"C:\path"#, #""C:\\path""#),
            ("a\nb\rc\td\u{8}e\u{C}f", #""a\nb\rc\td\be\ff""#),
            ("\u{0}\u{1}\u{1F}", #""\u0000\u0001\u001f""#),
            ("\u{7F}/", "\"\u{7F}/\""),  // DEL and '/' need no escaping
            ("line\u{2028}para\u{2029}end", #""line\u2028para\u2029end""#),
            ("🎉 Goal! ⚽️", "\"🎉 Goal! ⚽️\""),
            ("東京 3-1 大阪", "\"東京 3-1 大阪\""),
            ("", #""""#),
        ])
    func escaping(input: String, expected: String) throws {
        let text = Self.quoted(input)
        #expect(text == expected)
        #expect(TestSupport.validate(text) == nil)
        #expect(TestSupport.decodeJSONString(text) == input)  // round trip
    }

    @Test("escapes every control character and round-trips all of them")
    func allControlCharacters() throws {
        let input = String((0..<0x20).map { Character(Unicode.Scalar(UInt8($0))) }) + "\"\\"
        let text = Self.quoted(input)
        #expect(TestSupport.validate(text) == nil)
        #expect(TestSupport.decodeJSONString(text) == input)
        #expect(!text.utf8.dropFirst().dropLast().contains { $0 < 0x20 })
    }

    @Test("keys are escaped like strings")
    func keyEscaping() {
        let text = TestSupport.write { w in
            w.beginObject()
            w.key("we\"ird\n")
            w.int(1)
            w.endObject()
        }.text
        #expect(text == #"{"we\"ird\n":1}"#)
    }

    @Test("string(utf8:) replaces ill-formed UTF-8 with U+FFFD")
    func invalidUTF8() {
        let input: [UInt8] = [0x61, 0xFF, 0x62, 0xC0, 0x80, 0xE2, 0x82, 0x63, 0xED, 0xA0, 0x80]
        let text = input.withUnsafeBytes { raw in TestSupport.write { $0.string(utf8: raw) }.text }
        #expect(text == "\"a\u{FFFD}b\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}\"")
        #expect(TestSupport.validate(text) == nil)
        let valid = Array("ok ✓ 😀".utf8)
        let passed = valid.withUnsafeBytes { raw in TestSupport.write { $0.string(utf8: raw) }.text }
        #expect(passed == "\"ok ✓ 😀\"")
    }

    @Test("raw embeds validated JSON verbatim")
    func rawValue() throws {
        let state = try RawJSON(validating: #"{"home": 2, "away": [1, "x"]}"#)
        let text = TestSupport.write { w in
            w.beginArray()
            state.withUnsafeBytes { w.raw($0) }
            w.int(3)
            w.endArray()
        }.text
        #expect(text == #"[{"home": 2, "away": [1, "x"]},3]"#)
    }

    @Test("writes past the capacity are dropped but still counted")
    func overflow() {
        func document(_ w: inout JSONWriter) {
            w.beginObject()
            w.key("message")
            w.string("a fairly long string that will not fit")
            w.key("n")
            w.int(123_456)
            w.endObject()
        }
        let full = TestSupport.write(capacity: 1000, document)
        let size = full.writer.count
        #expect(!full.writer.overflowed)

        var counter = JSONWriter.counting()
        document(&counter)
        #expect(counter.count == size)
        #expect(counter.overflowed)
        #expect(counter.writtenBytes.isEmpty)

        let exact = TestSupport.write(capacity: size, document)
        #expect(!exact.writer.overflowed)
        #expect(exact.text == full.text)

        let short = TestSupport.write(capacity: size - 1, document)
        #expect(short.writer.overflowed)
        #expect(short.writer.count == size)
        #expect(short.writer.writtenBytes.count <= size - 1)
        #expect(full.text.hasPrefix(short.text))

        let tiny = TestSupport.write(capacity: 12, document)
        #expect(tiny.writer.overflowed)
        // The opening quote still fitted; the string's contents did not and were dropped whole.
        #expect(tiny.text == #"{"message":""#)
    }

    @Test("a capacity below the buffer size is honoured")
    func capacityBelowBuffer() {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 8)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0xEE)
        var writer = JSONWriter(buffer: buffer, capacity: 4)
        writer.beginArray()
        writer.int(12345)
        writer.endArray()
        #expect(writer.overflowed)
        #expect(writer.count == 7)
        #expect(buffer[1...].allSatisfy { $0 == 0xEE })  // only "[" fitted
    }

    @Test("nests up to the maximum depth")
    func deepNesting() {
        let depth = JSONWriter.maximumDepth
        let text = TestSupport.write { w in
            for _ in 0..<depth { w.beginArray() }
            for _ in 0..<depth { w.endArray() }
        }.text
        #expect(text == String(repeating: "[", count: depth) + String(repeating: "]", count: depth))
        #expect(TestSupport.validate(text) == nil)
    }

    @Test("the 8-bytes-at-a-time scan agrees with the byte rule for every byte in every position")
    func plainASCIIScan() {
        for value in 0...255 {
            let byte = UInt8(value)
            for position in 0..<8 {
                var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 19)
                bytes[8 + position] = byte
                let word = bytes[8..<16].withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                #expect(PlainASCII.containsSpecialByte(word) == !PlainASCII.isPlain(byte))
                let end = bytes.withUnsafeBytes { PlainASCII.runEnd($0, from: 1) }
                #expect(end == (PlainASCII.isPlain(byte) ? 19 : 8 + position))
            }
        }
    }

    @Test("the scan stops at the first special byte of a word whatever bytes follow it")
    func plainASCIIScanFindsTheFirstOfSeveral() {
        let specials: [UInt8] = [0x00, 0x01, 0x1F, 0x22, 0x5C, 0x80, 0xC3, 0xFF]
        for first in specials {
            for second in specials + [UInt8(ascii: "a"), 0x20, 0x7F] {
                for position in 0..<8 {
                    for later in position..<8 {
                        var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 19)
                        bytes[8 + later] = second
                        bytes[8 + position] = first
                        let end = bytes.withUnsafeBytes { PlainASCII.runEnd($0, from: 1) }
                        #expect(end == 8 + position, "\(first) at \(position), \(second) at \(later)")
                    }
                }
            }
        }
    }

    @Test("doubles match their description for many bit patterns")
    func manyDoubles() {
        var generator = APNsIDGenerator(seed: 5)
        var checked = 0
        while checked < 2000 {
            let value = Double(bitPattern: generator.next())
            guard value.isFinite else { continue }
            let text = TestSupport.write { $0.double(value) }.text
            #expect(text == value.description)
            #expect(TestSupport.validate(text) == nil, "\(text)")
            checked += 1
        }
    }
}

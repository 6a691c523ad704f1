@testable import FanfareCore

/// Helpers shared by the FanfareCore tests.
enum TestSupport {
    /// Runs `body` on a writer over a fresh buffer and returns the writer and what it wrote.
    static func write(capacity: Int = 4096, _ body: (inout JSONWriter) -> Void) -> (text: String, writer: JSONWriter) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 8)
        defer { buffer.deallocate() }
        var writer = JSONWriter(buffer: buffer)
        body(&writer)
        return (String(decoding: writer.writtenBytes, as: UTF8.self), writer)
    }

    static func validate(_ bytes: [UInt8]) -> JSONValidationError? {
        bytes.withUnsafeBytes { JSONValidator.validate($0) }
    }

    static func validate(_ text: String) -> JSONValidationError? {
        validate(Array(text.utf8))
    }

    /// Decodes a single JSON string value (the whole document must be one string).
    static func decodeJSONString(_ json: String) -> String? {
        let bytes = Array(json.utf8)
        return bytes.withUnsafeBytes { raw -> String? in
            var scanner = JSONScanner(raw)
            guard raw.first == UInt8(ascii: "\""), let scanned = try? scanner.scanString(),
                scanner.offset == raw.count
            else { return nil }
            return scanner.decodeString(scanned.contents, hasEscapes: scanned.hasEscapes)
        }
    }

    /// `count` bytes from a seeded generator (reproducible).
    static func randomBytes(_ count: Int, generator: inout APNsIDGenerator) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    static func token(byteCount: Int, seed: UInt64 = 1) throws -> DeviceToken {
        var generator = APNsIDGenerator(seed: seed)
        return try DeviceToken(bytes: randomBytes(byteCount, generator: &generator))
    }
}

// Log lines stay one line each, whatever a value holds (text from the network included), and JSON lines are
// JSON: written by FanfareCore's JSONWriter, the project's one JSON writer.
import FanfareService
import FanfareTestSupport
import Foundation
import Logging
import Testing

@Suite("Log lines", .ownThread)
struct LogFormatTests {
    /// Logs through a handler writing to a temporary file, and returns the file's lines.
    private func lines(_ format: LogFormat, _ log: (Logger) -> Void) throws -> [Substring] {
        let path = NSTemporaryDirectory() + "fanfare-log-" + UUID().uuidString
        let descriptor = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        #expect(descriptor >= 0)
        defer {
            close(descriptor)
            unlink(path)
        }
        let sink = LogSink(descriptor: descriptor)
        log(Logger(label: "test") { LineLogHandler(label: $0, format: format, sink: sink) })
        return try String(contentsOfFile: path, encoding: .utf8).split(
            separator: "\n", omittingEmptySubsequences: false
        ).dropLast()
    }

    private var hostile: String { "GOAWAY \"debug\"\n\u{1B}[2Jfake=1\r\t\u{7F}\u{2028}end" }

    @Test("JSON: one object a line, with numbers, booleans, nesting, and control characters escaped")
    func json() throws {
        var deep = Logger.MetadataValue.string("bottom")
        for _ in 0..<40 { deep = .array([deep]) }
        let written = try lines(.json) { logger in
            logger.info(
                "wave \(12) complete: \(hostile)",
                metadata: [
                    "delivered": "\(1_000_000)", "count": .stringConvertible(42), "ratio": .stringConvertible(0.5),
                    "ok": .stringConvertible(true), "reason": .string(hostile), "deep": deep,
                    "by_reason": .dictionary([
                        "BadDeviceToken": .stringConvertible(3), "Unregistered": .stringConvertible(1),
                    ]),
                ])
        }
        try #require(written.count == 1, "\(written)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(written[0].utf8)) as? [String: Any])
        #expect(object["message"] as? String == "wave 12 complete: \(hostile)")
        #expect(object["reason"] as? String == hostile)
        #expect(object["count"] as? Int == 42)
        #expect(object["ratio"] as? Double == 0.5)
        #expect(object["ok"] as? Bool == true)
        #expect(object["delivered"] as? String == "1000000")
        #expect((object["by_reason"] as? [String: Int]) == ["BadDeviceToken": 3, "Unregistered": 1])
        #expect(object["level"] as? String == "info" && object["label"] as? String == "test")
        // Past the nesting limit the rest is one string, not a trap.
        var level: Any? = object["deep"]
        var depth = 0
        while let array = level as? [Any] {
            level = array.first
            depth += 1
        }
        #expect(depth == LineLogHandler.maximumNesting - 1)
        #expect((level as? String)?.contains("bottom") == true)
    }

    @Test("text: a value that is not plain printable text is quoted and escaped, so it cannot add a line or a field")
    func text() throws {
        let written = try lines(.text) { logger in
            logger.warning(
                "connection closed \(hostile)", metadata: ["reason": .string(hostile), "channel": "match-42"])
        }
        try #require(written.count == 1, "\(written)")
        #expect(written[0].contains(" channel=match-42"))
        #expect(written[0].contains(#"reason="GOAWAY \"debug\"\n\u001b[2Jfake=1\r\t"#), "\(written[0])")
        #expect(!written[0].contains("\u{1B}"))
    }
}

import FanfareCore
internal import Foundation
import Logging
import Synchronization

/// How `fanfare serve` writes its log lines (`--log-format`).
public enum LogFormat: String, Sendable, CaseIterable {
    /// `2026-11-24T06:15:43.123Z info fanfare.service: wave 12 started channel=match-42`
    case text
    /// One JSON object per line: `{"ts":"…","level":"info","label":"…","message":"…","channel":"match-42"}`.
    case json
}

/// A swift-log handler writing one line per message to a file descriptor (stderr by default), as text or JSON.
/// Lines are written with one `write(2)` each under a lock, so lines of different threads never interleave.
public struct LineLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    private let label: String
    private let format: LogFormat
    private let sink: LogSink

    public init(label: String, format: LogFormat, level: Logger.Level = .info, sink: LogSink = .standardError) {
        self.label = label
        self.format = format
        self.logLevel = level
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        let time = Self.timestamp()
        var line: String
        switch format {
        case .text:
            line = "\(time) \(event.level) \(label): \(Self.text(.string("\(event.message)"), bare: true))"
            for key in merged.keys.sorted() { line += " \(key)=\(Self.text(merged[key]!))" }
        case .json:
            line = Self.rendered { writer in
                writer.beginObject()
                writer.key("ts")
                writer.string(time)
                writer.key("level")
                writer.string("\(event.level)")
                writer.key("label")
                writer.string(label)
                writer.key("message")
                writer.string("\(event.message)")
                for key in merged.keys.sorted() where !["ts", "level", "label", "message"].contains(key) {
                    writer.key(key)
                    Self.write(merged[key]!, to: &writer, depth: 1)
                }
                writer.endObject()
            }
        }
        sink.write(line + "\n")
    }

    private static func timestamp() -> String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        var parts = tm()
        var seconds = spec.tv_sec
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(spec.tv_nsec / 1_000_000))
    }

    /// A metadata value in a text line: as it is when it is plain printable text, otherwise as a JSON string
    /// literal, so a value (an error from the network, say) can never break the line or fake a field. The
    /// message itself (`bare`) may hold spaces.
    private static func text(_ value: Logger.MetadataValue, bare: Bool = false) -> String {
        switch value {
        case .string(let string):
            let plain = string.utf8.allSatisfy { byte in
                byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") || (bare && byte == 0x20)
            }
            return plain && !string.isEmpty ? string : quoted(string)
        case .stringConvertible(let convertible): return text(.string(convertible.description), bare: bare)
        case .array(let values): return "[" + values.map { text($0) }.joined(separator: ",") + "]"
        case .dictionary(let values):
            return "{" + values.keys.sorted().map { "\($0)=\(text(values[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    /// Containers nest at most this deep in a JSON line; deeper ones are written as their description.
    public static let maximumNesting = 16

    private static func write(_ value: Logger.MetadataValue, to writer: inout JSONWriter, depth: Int) {
        if depth >= maximumNesting {
            switch value {
            case .array, .dictionary:
                writer.string("\(value)")
                return
            case .string, .stringConvertible: break
            }
        }
        switch value {
        case .string(let string): writer.string(string)
        case .stringConvertible(let convertible):
            if let number = convertible as? any BinaryInteger, let exact = Int64(exactly: number) {
                writer.int(exact)
            } else if let number = convertible as? Double, number.isFinite {
                writer.double(number)
            } else if let flag = convertible as? Bool {
                writer.bool(flag)
            } else {
                writer.string(convertible.description)
            }
        case .array(let values):
            writer.beginArray()
            for element in values { write(element, to: &writer, depth: depth + 1) }
            writer.endArray()
        case .dictionary(let values):
            writer.beginObject()
            for key in values.keys.sorted() {
                writer.key(key)
                write(values[key]!, to: &writer, depth: depth + 1)
            }
            writer.endObject()
        }
    }

    /// A JSON string literal, written by the project's one JSON writer (control characters escaped, so a value
    /// can never break the line).
    static func quoted(_ string: String) -> String {
        rendered { $0.string(string) }
    }

    /// What `body` writes through `JSONWriter`: a counting pass sizes the string, a second pass fills it.
    private static func rendered(_ body: (inout JSONWriter) -> Void) -> String {
        var counter = JSONWriter.counting()
        body(&counter)
        return String(unsafeUninitializedCapacity: counter.count) { buffer in
            var writer = JSONWriter(buffer: UnsafeMutableRawBufferPointer(buffer))
            body(&writer)
            return writer.count
        }
    }
}

/// Where log lines go.
public final class LogSink: Sendable {
    private let descriptor: Int32
    private let lock = Mutex<Void>(())

    public init(descriptor: Int32) { self.descriptor = descriptor }

    public static let standardError = LogSink(descriptor: 2)

    func write(_ line: String) {
        var bytes = Array(line.utf8)
        lock.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeMutableBytes {
                    Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset)
                }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
        bytes.removeAll()
    }
}

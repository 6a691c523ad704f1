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
            line = "\(time) \(event.level) \(label): \(event.message)"
            for key in merged.keys.sorted() { line += " \(key)=\(Self.text(merged[key]!))" }
        case .json:
            line = "{\"ts\":\(Self.quoted(time)),\"level\":\(Self.quoted("\(event.level)")),\"label\":\(Self.quoted(label)),"
                + "\"message\":\(Self.quoted("\(event.message)"))"
            for key in merged.keys.sorted() where !["ts", "level", "label", "message"].contains(key) {
                line += ",\(Self.quoted(key)):\(Self.json(merged[key]!))"
            }
            line += "}"
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

    private static func text(_ value: Logger.MetadataValue) -> String {
        switch value {
        case .string(let string): return string.contains(" ") ? quoted(string) : string
        case .stringConvertible(let convertible): return text(.string(convertible.description))
        case .array(let values): return "[" + values.map(text).joined(separator: ",") + "]"
        case .dictionary(let values): return "{" + values.keys.sorted().map { "\($0)=\(text(values[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    private static func json(_ value: Logger.MetadataValue) -> String {
        switch value {
        case .string(let string): return quoted(string)
        case .stringConvertible(let convertible):
            if let number = convertible as? any BinaryInteger { return "\(number)" }
            if let number = convertible as? Double, number.isFinite { return "\(number)" }
            if let flag = convertible as? Bool { return flag ? "true" : "false" }
            return quoted(convertible.description)
        case .array(let values): return "[" + values.map(json).joined(separator: ",") + "]"
        case .dictionary(let values):
            return "{" + values.keys.sorted().map { "\(quoted($0)):\(json(values[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    /// A JSON string literal (control characters escaped, so a value can never break the line).
    static func quoted(_ string: String) -> String {
        var out = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
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
                let written = bytes.withUnsafeMutableBytes { Glibc.write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
        bytes.removeAll()
    }
}

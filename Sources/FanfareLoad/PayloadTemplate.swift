import FanfareClient
import FanfareCore

/// What each push of a load run carries.
public enum LoadPayload: Sendable {
    /// The same encoded bytes for every push (encode once, send many: no allocation per push).
    case fixed(PushPayload)
    /// A content-state template with per-push fields, encoded for each push without Codable.
    case template(PayloadTemplate)
}

/// A Live Activity content-state with placeholders, rendered per push:
/// `{{sequence}}` (0, 1, 2, ... per worker), `{{score}}` (sequence % 10), `{{timestamp}}` (UNIX seconds).
///
/// The template is checked once: rendering it with sample values must give a JSON object.
public struct PayloadTemplate: Sendable {
    public struct TemplateError: Error, CustomStringConvertible {
        public let description: String
    }

    enum Segment: Sendable {
        case literal([UInt8])
        case sequence, score, timestamp
    }

    let segments: [Segment]
    public let event: LiveActivityEvent

    public init(contentState template: String, event: LiveActivityEvent = .update) throws(TemplateError) {
        var segments: [Segment] = []
        var rest = Substring(template)
        while let open = rest.range(of: "{{") {
            segments.append(.literal(Array(rest[..<open.lowerBound].utf8)))
            guard let close = rest[open.upperBound...].range(of: "}}") else {
                throw TemplateError(description: "template has '{{' without '}}'")
            }
            switch rest[open.upperBound..<close.lowerBound] {
            case "sequence": segments.append(.sequence)
            case "score": segments.append(.score)
            case "timestamp": segments.append(.timestamp)
            case let other:
                throw TemplateError(
                    description: "unknown template field '{{\(other)}}'; use sequence, score or timestamp")
            }
            rest = rest[close.upperBound...]
        }
        segments.append(.literal(Array(rest.utf8)))
        self.segments = segments
        self.event = event
        let sample = render(sequence: 12345, timestamp: 1_700_000_000)
        do {
            _ = try RawJSON(validatingBytes: sample, requireObject: true)
        } catch {
            throw TemplateError(description: "template does not render to a JSON object: \(error)")
        }
    }

    func render(sequence: Int, timestamp: Int64) -> [UInt8] {
        var bytes: [UInt8] = []
        for segment in segments {
            switch segment {
            case .literal(let literal): bytes += literal
            case .sequence: bytes += Array(String(sequence).utf8)
            case .score: bytes += Array(String(sequence % 10).utf8)
            case .timestamp: bytes += Array(String(timestamp).utf8)
            }
        }
        return bytes
    }

    /// The push body for one push.
    public func payload(sequence: Int, timestamp: Int64) throws -> PushPayload {
        var content = LiveActivityContent(event: event, timestamp: timestamp)
        content.contentState = try RawJSON(
            validatingBytes: render(sequence: sequence, timestamp: timestamp), requireObject: true)
        return try PushPayload(liveActivity: content)
    }
}
